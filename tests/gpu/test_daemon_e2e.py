"""gpuobsd and gpuobsctl against real PyTorch programs on the GPU."""

from __future__ import annotations

import re
import sys
import time
import urllib.request
from pathlib import Path

from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs_testing.daemon import DaemonProcess, free_port, gpuobsctl
from harness import WORKLOADS, InjectedRun

TORCH_OPS = [sys.executable, str(WORKLOADS / "torch_ops.py"), "--iters", "3"]
TORCH_LOOP = [sys.executable, str(WORKLOADS / "torch_loop.py"), "--seconds", "10"]


def test_gpuobsctl_run_summarises_a_pytorch_program() -> None:
    done = gpuobsctl("unix:///nonexistent/gpuobsd.sock", "run", "--mode", "counter", "--top", "50", "--", *TORCH_OPS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gpuobs summary: 1 process(es)" in done.stderr and "accounting errors 0" in done.stderr
    rows = [line.split(None, 6) for line in done.stderr.splitlines() if line[:1].isdigit()]
    assert rows and all(row[2] == row[3] for row in rows), rows  # blocks counted = geometry
    names = " ".join(row[6] for row in rows)
    assert "nvjet" in names or "gemm" in names.lower(), names
    assert "scale_add_kernel" in names and "elementwise" in names


def test_a_separate_daemon_switches_a_running_pytorch_program(shm_dir: Path, tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "run", shm_dir, free_port())
    try:
        run = InjectedRun(TORCH_LOOP, shm_dir, mode="counter", drain=False)
        daemon.wait_processes(1, timeout=120)
        time.sleep(1.0)
        switched = gpuobsctl(daemon.address, "set-mode", "blocks")
        assert switched.returncode == 0, switched.stderr
        time.sleep(2.0)
        kernels = daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels
        assert sum(k.events_delivered for k in kernels) > 0  # blocks mode recorded enter events
        switched = gpuobsctl(daemon.address, "set-mode", "counter")
        assert switched.returncode == 0, switched.stderr
        out = run.finish()
        assert out["steps"] > 10
        daemon.wait_all_gone(20)
        kernels = daemon.stub.ListKernels(pb.ListKernelsRequest(), timeout=10).kernels
        names = [k.name for k in kernels]
        assert any("nvjet" in n or "gemm" in n.lower() for n in names), names
        for kernel in kernels:
            assert (
                kernel.blocks_observed + kernel.blocks_unpatched + kernel.blocks_unobserved == kernel.blocks_expected
            ), kernel.name
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert "gpuobs_blocks_total{" in metrics and ("nvjet" in metrics or "gemm" in metrics)
        # labels in any order: the identity labels (Hostname, UUID, ...) sort before `mode`
        assert re.search(r'^gpuobs_mode\{[^}]*\bmode="counter"', metrics, re.M), metrics[-2000:]
    finally:
        daemon.stop()
