"""The recordings' disk caps on their own: whole records only, the cap per recording, the cap for
all that run at once (given back as each ends), and the reason a recording stops for."""

from __future__ import annotations

from gpuobs.daemon.recording_budget import RecordingBudget


def test_the_cap_per_recording_grants_whole_records_and_says_so() -> None:
    budget = RecordingBudget(per_recording_bytes=1000, total_bytes=10_000)
    allowance = budget.allowance()
    assert allowance.records(10, 64) == 10 and not allowance.stopped
    assert allowance.records(10, 64) == 5  # 640 + 320 = 960 of 1000: whole records only
    assert "per recording" in allowance.stopped and allowance.records(1, 64) == 0
    allowance.release()
    assert budget.held_bytes == 0


def test_recordings_at_once_share_the_cap_for_all_and_get_it_back_as_they_end() -> None:
    budget = RecordingBudget(per_recording_bytes=10_000, total_bytes=1000)
    first, second = budget.allowance(), budget.allowance()
    assert first.records(12, 64) == 12  # 768 held
    assert second.records(12, 64) == 3  # the 232 left: 3 records
    assert "all recordings together" in second.stopped and not first.stopped
    assert budget.held_bytes == 768 + 192 <= 1000
    first.release()
    second.release()
    third = budget.allowance()
    assert third.records(15, 64) == 15 and budget.held_bytes == 960
