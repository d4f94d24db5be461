"""The control handshake between a consumer (the daemon's side) and a real producer process:
generations, acknowledgements, refusals, and bad requests that change nothing."""

from __future__ import annotations

import re
import time

import numpy as np
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
    assert state["applied_patch_set"] == PATCH_SETS["memory"]  # no graph execs: switched live
    assert synth.stop() == 0


def test_the_start_config_is_in_force_when_the_segment_is_first_seen(start_synth) -> None:
    """The segment is published with its start config (generation 0) in force, kernel filter
    included: a reader never sees it change without a request."""
    synth = start_synth("--mode", "blocks", "--kernel", "gemm|silu", "--rate", "10000")
    segment = Segment(synth.segment)
    first = segment.control_state()
    assert (first["applied_generation"], first["applied_mode"], first["applied_filter"]) == (0, MODES["blocks"],
                                                                                           "gemm|silu")
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
    generation = segment.request_control("sampled", shift=4)
    state = wait_applied(segment, generation)
    assert state["status"] == CONTROL_STATUS["failed_precondition"]
    # the injector's own decision (gpuobs-synth runs the segment library's), word for word
    assert state["status_message"] == ("mode sampled needs patch set memory and 3 CUDA graph execs are alive; "
                                       "restart the process with GPUOBS_PATCH_SET=memory")
    assert state["applied_mode"] == MODES["counter"]  # still the old mode
    assert state["applied_patch_set"] == PATCH_SETS["block"]
    # a switch within the set still works
    generation = segment.request_control("blocks")
    state = wait_applied(segment, generation)
    assert state["status"] == CONTROL_STATUS["ok"] and state["applied_mode"] == MODES["blocks"]
    assert segment.global_counters()["control_requests"] == 2  # every request counted, refused or not
    assert synth.stop() == 0


def test_kernel_filter_restricts_capture_but_not_counting(start_synth) -> None:
    synth = start_synth("--mode", "blocks", "--rate", "2000000", "--kernel", "flash|^nvjet")
    segment = Segment(synth.segment)
    time.sleep(0.3)
    assert synth.stop() == 0
    segment.drain_counts()
    counters, kernels = segment.counters()
    names = [k["demangled"] for k in segment.kernels()]
    matching = [i for i, k in enumerate(segment.kernels()) if re.search("flash|^nvjet", k["mangled"])]
    assert matching == [0, 1, 2]  # cuBLAS, FlashAttention, vLLM's reshape_and_cache_flash
    delivered = segment.aggregates()[: len(names)].sum(axis=1)
    assert all(delivered[i] > 0 for i in matching)
    assert delivered.sum() == delivered[matching].sum()
    assert np.array_equal(kernels["blocks_observed"], kernels["blocks_expected"])  # counting stays on
    assert int((kernels["blocks_observed"] > 0).sum()) > 1


def test_generations_continue_across_a_consumer_restart(start_synth) -> None:
    synth = start_synth("--mode", "counter", "--rate", "10000")
    first = Segment(synth.segment)
    wait_applied(first, first.request_control("blocks"))
    del first  # the consumer goes away (daemon restart); its lock goes with it
    second = Segment(synth.segment)
    generation = second.request_control("counter")
    assert generation == 2
    assert wait_applied(second, generation)["applied_mode"] == MODES["counter"]
    assert synth.stop() == 0


def test_a_control_seqlock_left_odd_by_a_killed_daemon_is_closed_on_open(tmp_path) -> None:
    """Issue 13, item 6: a consumer killed between taking the seqlock and releasing it left it odd
    for good: every later request failed, the producer ignored them all."""
    import mmap
    import struct

    writer = _native.Writer(str(tmp_path))
    offset = _native.geometry(1, 1024, 1024, 64, 65536)["control_offset"]  # desired_seq is the first word
    with open(writer.path, "r+b") as file, mmap.mmap(file.fileno(), 0) as mapped:
        struct.pack_into("<Q", mapped, offset, 7)  # odd: a request half written, its writer gone
    generation = Segment(writer.path).request_control("blocks")
    request = writer.poll_control(0)
    assert request is not None and request["generation"] == generation and request["mode"] == MODES["blocks"]
