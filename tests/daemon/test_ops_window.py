"""Op windows opened at run time (gpuobsctl ops --record-steps N): gpuobsd writes the request into
the segment with the config in force, the producer hands it over once, and exactly N steps are
recorded. gpuobs-synth plays the plugin and the injector (producer.h's decision, the injector's
writer): each of the window's N launches is a step with one op, op k labelled (k - 1) % 3 of its
three, its launch record naming it, and no launch record outside a window."""

from __future__ import annotations

import collections
import json
import time

import grpc
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.segment import MODES
from gpuobs_testing.daemon import gpuobsctl
from gpuobs_testing.synth import SYNTH_OP_LABELS

LABELS = SYNTH_OP_LABELS


def ops_of(address: str) -> dict:
    done = gpuobsctl(address, "--output", "json", "ops", "--top", "1000")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_for_ops(address: str, count: int, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        out = ops_of(address)
        if out["totals"] and out["totals"][0]["ops"] >= count or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


def launches_per_label(out: dict) -> dict[str, int]:
    per_label: collections.Counter = collections.Counter()
    for row in out["ops"]:
        per_label[row["op"]] += row["launches"]
    return dict(per_label)


def test_a_window_records_exactly_its_steps_and_no_launch_outside_it(start_synth, start_daemon) -> None:
    synth = start_synth("--mode", "counter", "--rate", "2000", "--kernels", "4", "--duration", "60")
    daemon = start_daemon()
    daemon.wait_processes(1)
    time.sleep(0.3)
    (before,) = ops_of(daemon.address)["totals"]
    assert (before["ops"], before["launches_attributed"], before["launches_without_op"]) == (0, 0, 0)
    opened = gpuobsctl(daemon.address, "ops", "--record-steps", "5", "--pid", str(synth.pid))
    assert opened.returncode == 0, opened.stderr
    assert str(synth.pid) in opened.stdout and " ok " in opened.stdout
    out = wait_for_ops(daemon.address, 5)
    time.sleep(0.5)  # nothing more comes: the window is over
    out = ops_of(daemon.address)
    (totals,) = out["totals"]
    assert (totals["ops"], totals["launches_attributed"], totals["launches_without_op"]) == (5, 5, 0), totals
    assert launches_per_label(out) == {LABELS[0]: 2, LABELS[1]: 2, LABELS[2]: 1}
    # the config in force is kept, and a mode switch after it opens no other window
    (process,) = daemon.status().processes
    assert process.mode == "counter" and process.control_status == "ok"
    assert gpuobsctl(daemon.address, "set-mode", "blocks").returncode == 0
    opened = gpuobsctl(daemon.address, "--output", "json", "ops", "--record-steps", "2")
    assert opened.returncode == 0 and json.loads(opened.stdout)["results"][0]["status"] == "ok", opened.stderr
    out = wait_for_ops(daemon.address, 7)
    time.sleep(0.5)
    (totals,) = ops_of(daemon.address)["totals"]
    assert (totals["ops"], totals["launches_attributed"], totals["launches_without_op"]) == (7, 7, 0), totals
    assert daemon.status().processes[0].mode == "blocks"
    assert synth.stop() == 0


def test_a_bad_window_is_refused_and_changes_nothing(start_synth, start_daemon) -> None:
    synth = start_synth("--mode", "counter", "--rate", "2000", "--kernels", "4", "--duration", "60")
    daemon = start_daemon()
    daemon.wait_processes(1)
    generation = daemon.status().processes[0].generation
    for steps, said in (("0", "1..1024 engine steps"), ("1025", "1..1024 engine steps")):
        refused = gpuobsctl(daemon.address, "ops", "--record-steps", steps)
        assert refused.returncode != 0 and said in refused.stderr, refused.stderr
    refused = gpuobsctl(daemon.address, "ops", "--record-steps", "3", "--pid", "999999999")
    assert refused.returncode != 0
    assert gpuobsctl(daemon.address, "ops", "--rank", "0").returncode != 0  # --rank selects a window's processes
    status = daemon.status().processes[0]
    assert status.generation == generation and status.mode == "counter"
    time.sleep(0.3)
    (totals,) = ops_of(daemon.address)["totals"]
    assert totals["ops"] == 0
    # the raw API answers the same: INVALID_ARGUMENT for a bad window, each process's answer else
    try:
        daemon.stub.OpenOpsWindow(pb.OpenOpsWindowRequest(steps=0), timeout=10)
        raise AssertionError("a window of 0 steps was taken")
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    answer = daemon.stub.OpenOpsWindow(pb.OpenOpsWindowRequest(steps=1, pids=[synth.pid]), timeout=10)
    assert [(r.pid, r.status) for r in answer.results] == [(synth.pid, "ok")]
    assert synth.stop() == 0


def test_a_window_never_undoes_a_switch_not_yet_applied(segment_dir, start_daemon) -> None:
    """A window carries the config in force; while a switch is still pending that config is not
    known, so the window is refused in that process (nothing written) and the switch stays asked."""
    from gpuobs import _native

    writer = _native.Writer(str(segment_dir))  # this test is the producer: it applies nothing until told
    writer.acknowledge(0, MODES["counter"], 0, 0, "", 0, "")
    writer.note_takes_op_windows()
    daemon = start_daemon()
    daemon.wait_processes(1)
    switch = gpuobsctl(daemon.address, "set-mode", "blocks", "--timeout", "0.5")
    assert switch.returncode != 0  # not acknowledged: pending
    window = gpuobsctl(daemon.address, "ops", "--record-steps", "2", "--timeout", "0.5")
    assert window.returncode != 0 and "still pending" in window.stdout + window.stderr, (window.stdout, window.stderr)
    request = writer.poll_control(0)
    assert (request["generation"], request["mode"], request["ops_steps"]) == (1, MODES["blocks"], 0), request


def test_a_window_in_a_process_of_a_mode_unknown_here_writes_nothing(segment_dir, start_daemon) -> None:
    from gpuobs import _native

    writer = _native.Writer(str(segment_dir))  # this test is the producer
    writer.acknowledge(0, 99, 0, 0, "", 0, "")  # applied mode 99: a newer producer's
    writer.note_takes_op_windows()
    daemon = start_daemon()
    daemon.wait_processes(1)
    refused = gpuobsctl(daemon.address, "ops", "--record-steps", "3", "--timeout", "0.5")
    assert refused.returncode != 0 and "mode 99" in refused.stdout + refused.stderr
    assert writer.poll_control(0) is None  # no request was written


def test_a_window_where_no_plugin_takes_one_is_refused(segment_dir, start_daemon) -> None:
    """A process without a framework plugin (a plain CUDA program) would acknowledge a window and
    record nothing: gpuobsd says so instead, and writes nothing."""
    from gpuobs import _native

    writer = _native.Writer(str(segment_dir))
    writer.acknowledge(0, MODES["counter"], 0, 0, "", 0, "")
    daemon = start_daemon()
    daemon.wait_processes(1)
    refused = gpuobsctl(daemon.address, "ops", "--record-steps", "3", "--timeout", "0.5")
    assert refused.returncode != 0 and "no framework plugin" in refused.stdout + refused.stderr
    assert writer.poll_control(0) is None
    writer.note_takes_op_windows()  # its plugin's first step
    opened = gpuobsctl(daemon.address, "ops", "--record-steps", "3", "--timeout", "0.5")
    assert opened.returncode != 0  # nobody acknowledges here: this test does not poll ...
    request = writer.poll_control(0)  # ... but the request was written, with the window
    assert (request["mode"], request["ops_steps"]) == (MODES["counter"], 3), request
