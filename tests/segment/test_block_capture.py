"""What a kernel's block leaders record (device_state.h's block_capture), from its slot's config
word and its userdata, as the patches read them: a kernel chosen for the access hooks
(GPUOBS_MEMORY_KERNELS) records what a hooked kernel records from its first launch, before the
tool thread has rewritten its slot's word."""

from __future__ import annotations

import pytest
from gpuobs import _native
from gpuobs.segment import MODES

CAPTURE = dict(_native.BLOCK_CAPTURES)


def capture(
    mode: str, *, hooked: bool = False, chosen: bool = False, captured: bool = True, launch_times: bool = False
) -> str:
    value = _native.block_capture(MODES[mode], 10, captured, hooked, chosen, launch_times)
    return {v: k for k, v in CAPTURE.items()}[value]


@pytest.mark.parametrize("chosen", [False, True])
def test_blocks_records_every_block_and_counter_none(chosen: bool) -> None:
    assert capture("blocks", chosen=chosen) == "every"
    assert capture("counter", chosen=chosen) == "none" and capture("off", chosen=chosen) == "none"


def test_sampled_records_the_hashed_blocks_of_kernels_without_hooks_only() -> None:
    assert capture("sampled") == "sampled"
    assert capture("sampled", hooked=True) == "launches"
    # the slot's word not yet rewritten (it says no hooks), the userdata says chosen
    assert capture("sampled", hooked=False, chosen=True) == "launches"
    assert capture("memory", hooked=False, chosen=True) == "launches"
    assert capture("memory") == "none"


def test_a_kernel_the_filter_leaves_out_records_nothing() -> None:
    for mode in ("blocks", "sampled", "memory"):
        assert capture(mode, captured=False, chosen=True) == "none"


def test_launch_times_make_counter_record_each_launch_and_change_no_other_mode() -> None:
    """GPUOBS_LAUNCH_TIMES=1: `counter` records the launch from block (0,0,0) (a step's span);
    every other mode records what it did without it, and a filtered-out kernel nothing."""
    assert capture("counter", launch_times=True) == "launches"
    assert capture("counter", launch_times=True, captured=False) == "none"
    for mode in ("off", "noop", "blocks", "sampled", "memory"):
        for hooked in (False, True):
            assert capture(mode, hooked=hooked, launch_times=True) == capture(mode, hooked=hooked), mode
