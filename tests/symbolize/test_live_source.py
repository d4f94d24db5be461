"""A live process's PCs to source lines through the daemon: gpuobs-synth plays the cubin's
kernel exactly as the injector keeps a module (the cubin written by hash beside the segments,
the function's address in the kernel table), and its memory events carry real instruction
offsets; `gpuobsctl source --pid` and `--top` must name the right lines and inline chains."""

from __future__ import annotations

import json
from pathlib import Path

from gpuobs.symbolize import CubinSymbols
from gpuobs_testing.cubins import INLINE_CHAIN_KERNEL as KERNEL
from gpuobs_testing.cubins import build_cubin
from gpuobs_testing.daemon import gpuobsctl

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "inline_chain.cu"


def test_pcs_of_a_live_process_map_to_lines_and_rank_by_events(
    tmp_path: Path, start_synth, start_daemon, cache_home: Path
) -> None:
    cubin = build_cubin(SOURCE, tmp_path, "-lineinfo")
    instructions = CubinSymbols(cubin).functions[KERNEL]
    load = next(offset for offset, text, _ in instructions if text.startswith("LDG"))
    store = next(offset for offset, text, _ in instructions if text.startswith("STG"))
    daemon = start_daemon("--analysis-share", "1")  # count every event: the ratio below is exact
    # the load executes twice per thread, the store once: the load's line must rank first
    synth = start_synth(
        "--mode",
        "memory",
        "--patch-set",
        "memory",
        "--kernels",
        "2",
        "--launches",
        "2",
        "--ring-records",
        str(1 << 21),
        "--cubin",
        str(cubin),
        "--cubin-function",
        KERNEL,
        "--cubin-offsets",
        f"{load:#x},{load:#x},{store:#x}",
    )
    assert synth.wait() == 0
    status = daemon.wait_all_gone(20)
    stats = next(p.injector for p in status.processes if p.pid == synth.pid)
    assert (stats.cubins_kept, stats.cubins_skipped) == (1, 0)
    kernels = json.loads(gpuobsctl(daemon.address, "--output", "json", "kernels", "--top", "0").stdout)["kernels"]
    kernel = next(k for k in kernels if k["mangled"] == KERNEL)
    kept = Path(kernel["cubin"])
    # by default in the user's own cache folder, never beside the segments (a name anyone can take)
    assert kept.parent == cache_home / "gpuobs" / "cubins" and kept.read_bytes() == cubin.read_bytes()
    function_pc = int(kernel["function_pc"])
    assert function_pc > 0

    done = gpuobsctl(daemon.address, "source", "--pid", str(synth.pid), hex(function_pc + load))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith(f"hot_kernel(float const*, float*, int)+{load:#x}: LDG")
    assert [line.split()[-1].rsplit("/", 1)[-1] for line in lines[2:]] == [
        "inline_chain.cu:4",
        "inline_chain.cu:5",
        "inline_chain.cu:6",
        "inline_chain.cu:9",
    ]

    done = gpuobsctl(
        daemon.address, "--output", "json", "source", "--pid", str(synth.pid), "--top", "2", "--kernel", "hot_kernel"
    )
    assert done.returncode == 0, done.stderr
    ranked = json.loads(done.stdout)
    first, second = ranked["lines"]
    assert first["line"].endswith("inline_chain.cu:4") and first["inlined"].count("<-") == 2
    assert second["line"].endswith("inline_chain.cu:9")
    assert first["events"] == 2 * second["events"] > 0
    assert ranked["events_counted"] + ranked["events_skipped"] >= first["events"] + second["events"]


def test_source_refuses_a_pc_no_kernel_holds(start_synth, start_daemon) -> None:
    daemon = start_daemon()
    synth = start_synth("--mode", "counter", "--kernels", "2", "--launches", "10")
    assert synth.wait() == 0
    done = gpuobsctl(daemon.address, "source", "--pid", str(synth.pid), "0x10")
    assert done.returncode == 1 and "no kernel of this process starts at or below 0x10" in done.stderr
    done = gpuobsctl(daemon.address, "source", "--pid", str(synth.pid), "--top", "0")
    assert done.returncode == 2 and "--top must be positive" in done.stderr  # a usage error


def test_cubins_are_stored_once_and_within_the_budget(tmp_path: Path, start_synth, cache_home: Path) -> None:
    from gpuobs.segment import Segment

    cubin = build_cubin(SOURCE, tmp_path, "-lineinfo")
    store = cache_home / "gpuobs" / "cubins"
    load = next(offset for offset, text, _ in CubinSymbols(cubin).functions[KERNEL] if text.startswith("LDG"))
    args = (
        "--mode",
        "counter",
        "--kernels",
        "2",
        "--launches",
        "4",
        "--cubin",
        str(cubin),
        "--cubin-function",
        KERNEL,
        "--cubin-offsets",
        hex(load),
    )
    first, second = start_synth(*args), start_synth(*args)  # two processes loading the same module
    assert first.wait() == 0 and second.wait() == 0
    assert [path.read_bytes() for path in store.iterdir()] == [cubin.read_bytes()]  # one file, whole
    other = tmp_path / "other"
    other.mkdir()
    starved = start_synth(
        *args, directory=other, env={"GPUOBS_CUBIN_MB": "0", "GPUOBS_CUBIN_DIR": str(other / "cubins")}
    )
    assert starved.wait() == 0
    assert not (other / "cubins").exists()
    counters = Segment(starved.segment, exclusive=False).counters()[0]
    assert (counters["cubins_kept"], counters["cubins_skipped"]) == (0, 1)
    entry = next(k for k in Segment(starved.segment, exclusive=False).kernels() if k["mangled"] == KERNEL)
    assert (entry["cubin_hash"], entry["function_pc"]) == (0, 0)
