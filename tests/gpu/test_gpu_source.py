"""Sampled PCs of a live CUDA C++ program to source lines: a
kernel built with -lineinfo whose load sits three inline levels deep; `gpuobsctl source` prints
file:line with the whole chain for the hottest PC, and `--top` ranks the load's line first."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from gpuobs_testing.daemon import DaemonProcess, free_port, gpuobsctl
from harness import InjectedRun

PROGRAM = Path(__file__).parent / "programs" / "inline_chain_main.cu"


def test_a_sampled_pc_maps_to_its_line_and_inline_chain(shm_dir: Path, tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    binary = tmp_path / "inline_chain"
    subprocess.run([nvcc, "-O3", "-lineinfo", "-arch=sm_90", "-o", str(binary), str(PROGRAM)], check=True)
    daemon = DaemonProcess(tmp_path / "run", shm_dir, free_port(), "--analysis-share", "1")
    try:
        run = InjectedRun(
            [str(binary)], shm_dir, mode="sampled", patch_set="memory", shift=4, drain=False, ring_records=1 << 22
        )
        assert run.finish()["status"] == "no error"
        done = gpuobsctl(daemon.address, "--output", "json", "kernels", "--top", "0")
        kernels = {k["mangled"]: k for k in json.loads(done.stdout)["kernels"]}
        pid = run.process.pid
        hot = json.loads(
            gpuobsctl(
                daemon.address,
                "--output",
                "json",
                "source",
                "--pid",
                str(pid),
                "--top",
                "3",
                "--kernel",
                "hot_loop_kernel",
            ).stdout
        )
        loop = kernels["_Z15hot_loop_kernelPKfPfi"]
        assert loop["cubin"] and int(loop["function_pc"]) > 0, loop
        described = gpuobsctl(
            daemon.address, "source", "--pid", str(pid), hex(int(loop["function_pc"]) + 0)
        )  # the function's first instruction
    finally:
        daemon.stop()
    print(json.dumps(hot, indent=1))
    first = hot["lines"][0]
    assert first["line"].endswith("inline_chain.cu:4"), hot
    assert [part.strip().rsplit("/", 1)[-1] for part in first["inlined"].split("<-")] == [
        "inline_chain.cu:5",
        "inline_chain.cu:6",
        "inline_chain.cu:15",
    ], first
    assert described.returncode == 0 and "hot_loop_kernel" in described.stdout, described.stderr
