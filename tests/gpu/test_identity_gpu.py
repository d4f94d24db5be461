"""Which GPU a process ran on, as the segment header names it: the injector records each context's
device when the context is created (PCI bus id and UUID from the driver), and the names must be
the ones nvidia-smi gives that GPU, since operators select processes by them (`set-mode --gpu`,
the `UUID` label of gpuobs_process_info)."""

from __future__ import annotations

import subprocess
import sys

from gpuobs.daemon.identity import pci_address
from harness import WORKLOADS, InjectedRun


def nvidia_smi_gpus() -> list[tuple[str, str]]:
    """(uuid, PCI bus id) of each GPU the driver lists, in nvidia-smi's spelling."""
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid,pci.bus_id", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [tuple(part.strip() for part in line.split(",")) for line in done.stdout.splitlines() if line.strip()]


def test_the_segment_names_the_gpu_as_nvidia_smi_does(shm_dir) -> None:
    run = InjectedRun([sys.executable, str(WORKLOADS / "torch_ops.py"), "--iters", "1"], shm_dir, mode="counter")
    run.finish(timeout=120)
    header = run.segment.reader.header()  # read after the run: the context's GPU is set once it exists
    assert header["gpu_count"] == 1, header
    gpu = header["gpus"][0]
    smi = nvidia_smi_gpus()
    matching = [(uuid, bus) for uuid, bus in smi if uuid.lower() == gpu["uuid"].lower()]
    assert len(matching) == 1, (gpu, smi)
    assert pci_address(gpu["pci_bus_id"]) == pci_address(matching[0][1]) is not None, (gpu, matching)
    assert gpu["context"] == 0 and gpu["ordinal"] == 0  # the one context of a one-GPU program, device 0
