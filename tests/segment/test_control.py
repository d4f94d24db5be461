"""The control handshake between a consumer (the daemon's side) and a real producer process:
generations, acknowledgements, refusals, and bad requests that change nothing."""

from __future__ import annotations

import time

import pytest
from gpuobs import _native
from gpuobs.segment import CONTROL_STATUS, MODES, PATCH_SETS, Segment
from gpuobs_testing.synth import wait_applied, wait_events


def test_mode_switch_is_acknowledged_and_takes_effect(start_synth) -> None:
    synth = start_synth("--mode", "counter", "--rate", "200000")
    segment = Segment(synth.segment)
    state = segment.control_state()
    assert (state["applied_generation"], state["applied_mode"]) == (0, MODES["counter"])
    time.sleep(0.05)
    assert segment.drain_counts()[0] == 0  # counter mode records no events

    generation = segment.request_control("blocks")
    assert generation == 1
    state = wait_applied(segment, generation)
    assert state["applied_mode"] == MODES["blocks"] and state["status"] == CONTROL_STATUS["ok"]
    assert wait_events(segment) > 0  # events flow after the switch

    generation = segment.request_control("sampled", shift=10)
    state = wait_applied(segment, generation)
    assert (state["applied_mode"], state["applied_shift"]) == (MODES["sampled"], 10)
    assert state["applied_patch_set"] == PATCH_SETS["block"]  # sampled blocks: no re-patching

    generation = segment.request_control("memory")
    state = wait_applied(segment, generation)
    assert state["applied_mode"] == MODES["memory"] and state["status"] == CONTROL_STATUS["ok"]
    assert state["applied_patch_set"] == PATCH_SETS["memory"]  # no access hook anywhere, no graph execs: switched live
    assert synth.stop() == 0


def test_the_start_config_is_in_force_when_the_segment_is_first_seen(start_synth) -> None:
    """The segment is published with its start config (generation 0) in force, kernel filter
    included: a reader never sees it change without a request."""
    synth = start_synth("--mode", "blocks", "--kernel", "gemm|silu", "--rate", "10000")
    segment = Segment(synth.segment)
    first = segment.control_state()
    assert (first["applied_generation"], first["applied_mode"], first["applied_filter"]) == (
        0,
        MODES["blocks"],
        "gemm|silu",
    )
    assert first["desired_filter"] == "gemm|silu" and first["status"] == CONTROL_STATUS["ok"]
    for _ in range(20):
        time.sleep(0.005)
        assert segment.control_state() == first
    assert synth.stop() == 0


def test_invalid_requests_change_nothing(start_synth) -> None:
    synth = start_synth("--mode", "blocks", "--rate", "10000")
    segment = Segment(synth.segment)
    before = segment.control_state()
    for request, reason in [
        (dict(mode="sampled", shift=99), "shift 99 out of range"),
        (dict(mode="fast"), "unknown mode"),
        (dict(mode="blocks", kernel_filter="(unclosed"), "invalid kernel filter"),
        (dict(mode="blocks", kernel_filter="x" * 300), "longer than 255"),
        (dict(mode="blocks", patch_set="tensor"), "unknown patch set"),
        (dict(mode="blocks", ops_steps=_native.MAX_OPS_STEPS + 1), "at most 1024"),
    ]:
        with pytest.raises(ValueError, match=reason):
            segment.request_control(**request)
    time.sleep(0.02)
    after = segment.control_state()
    assert after["desired_generation"] == before["desired_generation"] == 0
    assert after == before
    assert synth.stop() == 0


def test_an_op_window_is_handed_over_once_and_not_kept_in_force(tmp_path) -> None:
    """The producer's half: the request carries the window's steps; a later request without them
    asks for no window (the daemon writes every field of a request)."""
    writer = _native.Writer(str(tmp_path))
    segment = Segment(writer.path)
    generation = segment.request_control("counter", ops_steps=7)
    request = writer.poll_control(0)
    assert (request["generation"], request["ops_steps"]) == (generation, 7)
    segment.request_control("blocks")
    assert writer.poll_control(generation)["ops_steps"] == 0
    assert segment.control_state()["desired_ops_steps"] == 0


def test_cross_set_switch_is_refused_while_graph_execs_live(start_synth) -> None:
    synth = start_synth("--mode", "counter", "--live-graphs", "3", "--rate", "10000")
    segment = Segment(synth.segment)
    generation = segment.request_control("memory")
    state = wait_applied(segment, generation)
    assert state["status"] == CONTROL_STATUS["failed_precondition"]
    # the injector's own decision (gpuobs-synth runs the segment library's), word for word, with
    # the remedies: chosen kernels, or sampled, which needs no other set
    assert state["status_message"] == (
        "mode memory needs access hooks and no kernel has them (3 CUDA graph execs "
        "are alive); restart with GPUOBS_MEMORY_KERNELS=REGEX for chosen kernels, or "
        "use sampled"
    )
    assert state["applied_mode"] == MODES["counter"]  # still the old mode
    assert state["applied_patch_set"] == PATCH_SETS["block"]
    generation = segment.request_control("counter", patch_set="memory")  # a set asked for by name
    state = wait_applied(segment, generation)
    assert state["status"] == CONTROL_STATUS["failed_precondition"]
    assert state["status_message"] == (
        "patch set memory needs re-patching and 3 CUDA graph execs are alive; "
        "restart the process with GPUOBS_PATCH_SET=memory"
    )
    # sampled, and every switch within the set, still work
    for mode in ("sampled", "blocks"):
        generation = segment.request_control(mode, shift=4)
        state = wait_applied(segment, generation)
        assert state["status"] == CONTROL_STATUS["ok"] and state["applied_mode"] == MODES[mode]
    assert segment.global_counters()["control_requests"] == 4  # every request counted, refused or not
    assert synth.stop() == 0


@pytest.mark.parametrize(
    "mode, patch_set, chooses, needed",
    [
        ("memory", "block", False, "memory"),  # accesses and no hook anywhere: the memory set
        ("memory", "block", True, "block"),  # the chosen kernels' hooks serve it
        ("sampled", "block", False, "block"),  # sampled blocks
        ("sampled", "memory", False, "memory"),
        ("counter", "memory", False, "memory"),  # the set asked for (gpuobsd asks the one in force)
        ("blocks", "block", True, "block"),
    ],
)
def test_the_patch_set_a_request_needs(mode: str, patch_set: str, chooses: bool, needed: str) -> None:
    assert _native.patch_set_needed(MODES[mode], PATCH_SETS[patch_set], chooses) == PATCH_SETS[needed]


def test_every_refusal_fits_the_status_message() -> None:
    """The longest refusal, with a count of graph execs of 20 digits, is not cut."""
    message = (
        "mode memory needs access hooks and no kernel has them (18446744073709551615 CUDA graph execs are "
        "alive); restart with GPUOBS_MEMORY_KERNELS=REGEX for chosen kernels, or use sampled"
    )
    assert len(message.encode()) < _native.STATUS_MESSAGE_BYTES  # and its terminating zero
