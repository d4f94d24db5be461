"""Which GPU and rank a process is: the identity a framework plugin sets and the GPUs the injector
records per context, in the segment header (gpuobs-synth sets them with the same writer), shown by
status and the process-info metric, and used by set-mode to select processes. Two processes play
the two ranks of a tensor-parallel engine on two GPUs; a third says nothing about itself."""

from __future__ import annotations

import json
import urllib.request

import pytest
from gpuobs_testing.daemon import gpuobsctl

UUIDS = ["GPU-8e8ee9c3-0b5d-4c1f-9a7e-000000000000", "GPU-8e8ee9c3-0b5d-4c1f-9a7e-000000000001"]
PCI = ["0000:3b:00.0", "0000:5d:00.0"]


@pytest.fixture
def tensor_parallel(start_synth, start_daemon):
    ranks = [
        start_synth(
            "--mode",
            "counter",
            "--rate",
            "20000",
            "--rank",
            str(rank),
            "--world-size",
            "2",
            "--local-rank",
            str(rank),
            "--model",
            "Qwen3-8B",
            "--gpu",
            f"{rank},{PCI[rank]},{UUIDS[rank]}",
            "--label",
            f"vllm engine rank {rank}",
        )
        for rank in (0, 1)
    ]
    plain = start_synth("--mode", "counter", "--rate", "20000")  # no --duration: the fixture stops them
    daemon = start_daemon()
    daemon.wait_processes(3)
    yield daemon, ranks, plain
    for synth in (*ranks, plain):
        synth.stop()


def modes(daemon) -> dict[int, str]:
    return {p.pid: p.mode for p in daemon.status().processes}


def test_status_and_metrics_say_which_rank_and_gpu(tensor_parallel) -> None:
    daemon, ranks, plain = tensor_parallel
    done = gpuobsctl(daemon.address, "--output", "json", "status")
    assert done.returncode == 0, done.stderr
    by_pid = {p["pid"]: p for p in json.loads(done.stdout)["processes"]}
    for rank, synth in enumerate(ranks):
        p = by_pid[synth.pid]
        assert (p["identity_set"], p["role"], p["rank"], p["world_size"], p["local_rank"], p["model"]) == (
            True,
            "engine",
            rank,
            2,
            rank,
            "Qwen3-8B",
        )
        assert (p["gpu_count"], p["gpus"]) == (
            1,
            [{"ordinal": rank, "context": 0, "pci_bus_id": PCI[rank], "uuid": UUIDS[rank]}],
        )
    assert (by_pid[plain.pid]["identity_set"], by_pid[plain.pid]["gpus"]) == (False, [])
    text = gpuobsctl(daemon.address, "status").stdout
    row = next(line for line in text.splitlines() if line.startswith(str(ranks[1].pid)))
    assert "1/2" in row and PCI[1] in row
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as response:
        exposition = response.read().decode()
    info = [line for line in exposition.splitlines() if line.startswith("gpuobs_process_info{")]
    assert len(info) == 3
    mine = next(line for line in info if f'pid="{ranks[1].pid}"' in line)
    for label in (
        'rank="1"',
        'world_size="2"',
        'model="Qwen3-8B"',
        'cuda_ordinal="1"',  # the ordinal as the process sees it; `gpu` is DCGM's (the driver's order)
        f'UUID="{UUIDS[1]}"',  # spelled as dcgm-exporter spells it
        f'pci_bus_id="{PCI[1]}"',
        'role="engine"',
    ):
        assert label in mine, (label, mine)
    assert 'rank=""' in next(line for line in info if f'pid="{plain.pid}"' in line)
    # every other series carries the identity, never the pid: one set per rank, one for the plain process
    events = [line for line in exposition.splitlines() if line.startswith("gpuobs_events_total{")]
    assert len(events) == 3 and not any("pid=" in line for line in events)
    assert any(f'UUID="{UUIDS[1]}"' in line and 'rank="1"' in line for line in events)


def test_set_mode_selects_by_rank_gpu_and_pid(tensor_parallel) -> None:
    daemon, ranks, plain = tensor_parallel
    assert gpuobsctl(daemon.address, "set-mode", "noop", "--rank", "1").returncode == 0
    assert modes(daemon) == {ranks[0].pid: "counter", ranks[1].pid: "noop", plain.pid: "counter"}
    for gpu in (UUIDS[0], UUIDS[0].upper(), PCI[0], "00000000:3B:00.0"):  # as CUDA and nvidia-smi write them
        assert gpuobsctl(daemon.address, "set-mode", "off", "--gpu", gpu).returncode == 0
        assert modes(daemon) == {ranks[0].pid: "off", ranks[1].pid: "noop", plain.pid: "counter"}
        assert gpuobsctl(daemon.address, "set-mode", "counter", "--gpu", gpu).returncode == 0
    both = gpuobsctl(daemon.address, "set-mode", "off", "--rank", "0", "--pid", str(plain.pid))
    assert both.returncode == 0, both.stderr
    assert modes(daemon) == {ranks[0].pid: "off", ranks[1].pid: "noop", plain.pid: "off"}
    before = modes(daemon)
    for flag, value in (("--rank", "7"), ("--gpu", "GPU-none"), ("--gpu", "0")):  # an ordinal is each process's own
        refused = gpuobsctl(daemon.address, "set-mode", "blocks", flag, value)
        assert refused.returncode == 1 and "no live observed process has" in refused.stderr, refused.stderr
    assert modes(daemon) == before  # refused: nothing was switched
    assert gpuobsctl(daemon.address, "set-mode", "counter").returncode == 0  # no selector: every process
    assert set(modes(daemon).values()) == {"counter"}
