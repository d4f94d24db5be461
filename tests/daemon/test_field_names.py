"""What the daemon takes from layout.h's field tables by name is named there: a field renamed or
removed fails here, not as a silent 0, and a per-kernel counter added to the table must be decided
in the metrics (exported or not) before this passes."""

from __future__ import annotations

from gpuobs import _native
from gpuobs.segment import KERNEL_COUNTERS_DTYPE


def test_the_metrics_table_names_every_per_kernel_counter_and_nothing_else() -> None:
    from gpuobs.daemon.metrics import KERNEL_COUNTER_EXPORTS, KERNEL_COUNTER_METRICS

    assert set(KERNEL_COUNTER_METRICS) == set(KERNEL_COUNTERS_DTYPE.names)
    assert KERNEL_COUNTER_EXPORTS, "some per-kernel counter is exported"
    names = [name for name, _ in KERNEL_COUNTER_EXPORTS.values()]
    assert len(set(names)) == len(names) and all(name.startswith("gpuobs_") for name in names)


def test_every_injector_stat_is_a_global_counter() -> None:
    from gpuobs.daemon.service_processes import INJECTOR_COUNTERS, injector_stats

    counters = {name for name, _, _ in _native.FIELDS["global_counters"]}
    assert set(INJECTOR_COUNTERS.values()) <= counters, set(INJECTOR_COUNTERS.values()) - counters
    stats = injector_stats({"modules_loaded": 3, "resource_callback_ns": 2_500_000_000, "patch_ns": 1})
    assert stats.modules_loaded == 3 and stats.resource_callback_seconds == 2.5 and stats.patch_seconds == 1e-9
    assert stats.cubins_kept == 0 and stats.launch_callback_seconds == 0.0
