"""Which layer runs this kernel, on the GPU: a small PyTorch model under the op recorder, the
injector's launch trace on; the op attribution (the daemon's own code, fed the drained launch
records) gives each op its kernels: the projections cuBLAS GEMMs, silu and the residual add
elementwise kernels, every eager launch inside the recorded forward attributed to one op."""

from __future__ import annotations

import sys

from gpuobs.daemon.op_attribution import OpAttribution
from harness import WORKLOADS, InjectedRun, assert_small_model_labels


def test_each_op_of_a_small_model_gets_its_kernels(shm_dir) -> None:
    run = InjectedRun(
        [sys.executable, str(WORKLOADS / "torch_ops_labelled.py")],
        shm_dir,
        mode="counter",
        env={"GPUOBS_LAUNCH_TRACE": "1"},
    )
    out = run.finish(timeout=120)
    launches = run.all_launches()
    ops = OpAttribution()
    ops.on_launches(launches)
    names = {int(entry["slot"]): entry["demangled"] for entry in run.segment.kernels()}  # by slot: names repeat
    table = {label: [names.get(slot, "?") for slot in kernels] for label, kernels in ops.labels.items()}
    recorded = set(out["labels"])
    assert recorded and set(table) <= recorded, set(table) - recorded
    assert_small_model_labels(table)
    totals = ops.report()
    # each layer's four ops launched at least a kernel each; the warm-up's launches had no op
    assert totals.launches_attributed >= 2 * 4 and totals.launches_without_op >= 2 * 4
    assert totals.ops == len(out["labels"])
