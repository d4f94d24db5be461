"""gpuobsctl requests: GPU time per request, the top requests by device time that each process
keeps (each settled step's device span split by its requests' tokens), or every kept request."""

from __future__ import annotations

import argparse

from gpuobs.api.v1 import observer_pb2 as pb

from ..arguments import number, pid
from ..connection import call
from ..output import emit, message_dict

NAME = "requests"
HELP = "GPU time per request (vLLM plugin): device time, tokens, steps, launches and blocks"
EXAMPLES = """examples:
  gpuobsctl requests --top 10
  gpuobsctl --output json requests --all"""
COLUMNS = [
    ("pid", "PID"),
    ("request", "REQUEST"),
    ("device_ms", "DEVICE MS"),
    ("tokens", "TOKENS"),
    ("steps", "STEPS"),
    ("untimed", "UNTIMED"),
    ("launches", "LAUNCHES"),
    ("blocks", "BLOCKS"),
    ("span", "STEPS SEEN"),
]
KERNEL_COLUMNS = [("kernel", "KERNEL"), ("executions", "EXECUTIONS"), ("blocks", "BLOCKS"), ("kv", "KV CACHE")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=pid, action="append", default=[], help="only this process (repeatable)")
    parser.add_argument("--top", type=number(1, 100_000), default=20, help="the N requests with the most device time")
    parser.add_argument(
        "--all", action="store_true", help="every kept request, in the order each began (all pages; --top ignored)"
    )


def kernel_row(kernel: pb.RequestKernel) -> dict:
    return {
        "kernel": kernel.kernel,
        "executions": kernel.executions,
        "blocks": kernel.blocks,
        "kv": "yes" if kernel.kv_cache else "",
    }


SHOWN_RANGES = 16  # slot runs printed; --output json has them all


def cache_slots_text(response: pb.ListRequestsResponse, r: pb.RequestTime) -> str:
    """The KV-cache slots one request wrote, or why none are known: never "none" for "not looked"."""
    if not response.kv_cache_layouts:
        return (
            "KV-cache slots: not recorded: no KV-cache layout came from the plugin (it sends one where the cache "
            "kernel's accesses are hooked: GPUOBS_MEMORY_KERNELS, or the memory patch set)"
        )
    if not response.cache_stores:
        return (
            "KV-cache slots: not recorded: no store of a cache kernel was read (mode memory or sampled, with "
            "access hooks on the cache kernel)"
        )
    runs = [f"{s.first}" if s.first == s.last else f"{s.first}-{s.last}" for s in r.cache_slot_ranges]
    shown = ", ".join(runs[:SHOWN_RANGES]) + (f", ... ({len(runs)} runs in all)" if len(runs) > SHOWN_RANGES else "")
    return (
        f"KV-cache slots of {r.request} (pid {r.pid}): {r.cache_slots} slots written in {r.cache_steps} of its "
        f"{r.steps} steps, {r.cache_stores} stores read"
        + ("" if r.cache_slots_complete else " (past the daemon's budget of kept slots: some not listed)")
        + (f": {shown}" if runs else "")
        + f"\ncache stores read: {response.cache_stores}, to a request of their step "
        f"{response.cache_stores_attributed}, to no known request's block {response.cache_stores_unattributed}, "
        f"outside the KV cache {response.cache_stores_outside}"
        + "".join(
            f", {label} {value}"
            for label, value in (
                ("ambiguous (a step run without a graph shared their replay)", response.cache_stores_ambiguous),
                ("skipped by the analysis budget", response.cache_stores_skipped),
                ("before the layout came", response.cache_stores_before_layout),
                ("dropped (past the daemon's bounds, or of no step that settled)", response.cache_stores_dropped),
            )
            if value
        )
        + (
            f"; block owners forgotten {response.cache_owners_forgotten} times (a step's text cut short or lost)"
            if response.cache_owners_forgotten
            else ""
        )
    )


def fetch(address: str, request: pb.ListRequestsRequest) -> pb.ListRequestsResponse:
    """One reply, or with `every` all pages in one (the totals are the last page's)."""
    response = call(address, "ListRequests", request)
    rows = list(response.requests)
    while request.every and response.next_page_token:
        request.page_token = response.next_page_token
        response = call(address, "ListRequests", request)
        rows.extend(response.requests)
    del response.requests[:]
    response.requests.extend(rows)
    return response


def show(address: str, output: str, request: pb.ListRequestsRequest) -> int:
    """Printed as a table (or JSON): shared with `gpuobsctl request ID`, which adds each row's
    kernels."""
    response = fetch(address, request)
    if output == "json":
        emit("json", message_dict(response))
        return 0
    rows = [
        {
            "pid": r.pid,
            "request": r.request,
            "device_ms": f"{r.device_ns / 1e6:.3f}",
            "tokens": r.tokens,
            "steps": r.steps,
            "untimed": r.steps_untimed,
            "launches": r.kernel_launches,
            "blocks": r.blocks,
            "span": f"{r.first_step}..{r.last_step}",
        }
        for r in response.requests
    ]
    print(
        f"{response.steps_settled} settled steps' device time split among their requests: "
        f"{response.steps_device_ns / 1e6:.3f} ms"
        + (
            f" ({response.requests_let_go} requests let go, {response.device_ns_let_go / 1e6:.3f} ms of it)"
            if response.requests_let_go
            else ""
        )
        + (f"; {response.steps_lost} steps let go before they settled" if response.steps_lost else "")
    )
    if rows:
        emit("text", None, COLUMNS, rows)
    for r in response.requests:
        if request.request:
            print("\n" + cache_slots_text(response, r))
        if r.kernels:
            print(
                f"\nkernels of {r.request} (pid {r.pid}) over {r.kernel_steps} of its {r.steps} steps (those still "
                "kept in detail): executions of its steps, its token share of their blocks"
            )
            emit(
                "text",
                None,
                KERNEL_COLUMNS,
                [kernel_row(k) for k in r.kernels],
            )
    return 0


def run(args: argparse.Namespace) -> int:
    return show(args.address, args.output, pb.ListRequestsRequest(pids=args.pid, top=args.top, every=args.all))
