"""gpuobsctl status: the daemon and every observed process."""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.segment import SAMPLED_MODES

from ..connection import call
from ..output import emit, message_dict, table, uptime

NAME = "status"
HELP = "show the daemon and the processes it observes"
EXAMPLES = """examples:
  gpuobsctl status
  gpuobsctl --output json status | jq '.processes[] | {pid, mode}'"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    response = call(args.address, "GetStatus", pb.GetStatusRequest())
    if args.output == "json":
        emit("json", message_dict(response))
        return 0
    alive = sum(1 for p in response.processes if p.alive)
    print(
        f"gpuobsd {response.version}, up {uptime(response.uptime_ms / 1000)}, segments in {response.segment_dir}, "
        f"{alive} process(es) observed"
        + (f", {len(response.processes) - alive} exited" if len(response.processes) > alive else "")
    )
    rows = []
    for p in response.processes:
        device = next((s for s in p.stages if s.stage == "device"), None)
        rows.append(
            {
                "pid": p.pid,
                "label": p.label or "-",
                "alive": "yes" if p.alive else "gone",
                "rank": f"{p.rank}/{p.world_size}" if p.identity_set else "-",
                "gpu": (p.gpus[0].pci_bus_id + (f" +{p.gpu_count - 1}" if p.gpu_count > 1 else "")) if p.gpus else "-",
                "mode": p.mode + (f" (shift {p.shift})" if p.mode in SAMPLED_MODES else ""),
                "set": p.patch_set,
                "gen": p.generation,
                "control": p.control_status,
                "launches": p.launches,
                "kernels": p.kernels,
                "events": device.delivered if device else 0,
                "dropped": device.dropped if device else 0,
                "errors": p.accounting_errors,
            }
        )
    if rows:
        table(
            [
                ("pid", "PID"),
                ("label", "LABEL"),
                ("rank", "RANK"),
                ("gpu", "GPU"),
                ("alive", "ALIVE"),
                ("mode", "MODE"),
                ("set", "SET"),
                ("gen", "GEN"),
                ("control", "CONTROL"),
                ("launches", "LAUNCHES"),
                ("kernels", "KERNELS"),
                ("events", "EVENTS"),
                ("dropped", "DROPPED"),
                ("errors", "ACCT_ERRORS"),
            ],
            rows,
        )
    quiet = []  # processes whose injector has done nothing yet: one line for all of them
    for p in response.processes:
        i = p.injector
        idle = not (i.modules_loaded or i.patch_failures or i.cubins_kept or i.cubins_skipped) and not (
            i.resource_callback_seconds or i.launch_callback_seconds or i.graph_callback_seconds
        )
        if idle:
            quiet.append(p.pid)  # its other lines (analysis, access hooks, profilers) still follow
        else:
            print(
                f"pid {p.pid}: modules {i.modules_loaded} loaded, {i.modules_patched} patched, {i.patch_failures} "
                f"failed; cubins {i.cubins_kept} kept, {i.cubins_skipped} skipped; time in gpuobs callbacks: "
                f"modules {i.resource_callback_seconds:.2f} s (patching {i.patch_seconds:.2f} s, cubins "
                f"{i.cubin_seconds:.2f} s), launches {i.launch_callback_seconds:.2f} s, graphs "
                f"{i.graph_callback_seconds:.2f} s"
            )
        if p.block_events_unanalysed:
            print(
                f"pid {p.pid}: {p.block_events_unanalysed} block events not analysed (gpuobsd's analysis share was "
                f"spent): block durations and the launches `hangs` names may be missing; stalled kernels are not"
            )
        if p.memory_kernels:
            print(
                f"pid {p.pid}: access hooks for kernels matching {p.memory_kernels!r} ({i.modules_access_hooked} "
                f"module(s)): memory and sampled record their accesses, sampled 1 in 2^shift blocks of the others"
            )
        if i.replay_spans_unclean:
            print(
                f"pid {p.pid}: {i.replay_spans_unclean} of {i.replay_spans + i.replay_spans_unclean} graph replays "
                "read without a span (the injector fell a span table behind, or a reset raced): their steps are "
                "untimed"
            )
        if i.profiler_starts:
            print(
                f"pid {p.pid}: {i.profiler_starts} profiler start(s) recorded no GPU activity: CUPTI cannot attach "
                f"beside gpuobs (the driver admits one tool); `gpuobsctl trace` records this process's kernels"
            )
    if quiet:
        print(f"pid {', '.join(map(str, quiet))}: no CUDA module loaded, no time in gpuobs callbacks")
    for rejected in response.rejected_segments:
        print(f"rejected: {rejected}")
    if response.rejected_segments_total > len(response.rejected_segments):
        print(f"rejected: {response.rejected_segments_total - len(response.rejected_segments)} more files")
    return 0
