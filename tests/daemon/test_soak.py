"""The whole daemon under a bounded soak: at least 200 producers come and go (some
crash), hostile files land in the segment directory, fuzzed requests hit every method, while
scrapes and streams run. The daemon must not crash nor grow, and every producer's counts must
balance. bench/soak.py runs the same for 30 minutes."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuobs_testing.soak import Soak


@pytest.mark.slow
def test_a_soak_of_comings_and_goings_junk_and_fuzz(segment_dir: Path, tmp_path: Path) -> None:
    figures = Soak(segment_dir, tmp_path / "run", seconds=150, lifetimes=200).run()
    print(figures)
    assert figures["daemon_alive"] and not figures["crashes_in_log"], figures
    assert figures["lifetimes"] >= 200 and figures["producer_failures"] == 0, figures
    assert figures["processes_gone"] >= 200 and figures["accounting_errors"] == 0, figures
    assert figures["unbalanced_retained"] == [], figures
    assert figures["fuzz_failures"] == [] and figures["fuzzed_requests"] > 100, figures
    assert figures["stream_failures"] == [] and figures["scrape_failures"] == 0 and figures["scrapes"] > 10, figures
    # bounded: exited processes kept at most --exited-max, their segments deleted beyond it
    assert figures["retained"] <= 8 and figures["segments_left"] <= 8, figures
    assert figures["rejected_total"] == figures["junk_now"] > 0, figures
    assert figures["status_bytes_max"] < 256 * 1024, figures
    rss = figures["rss_mib"]
    warm = rss[len(rss) // 4]  # after the first quarter: imports, first analyses, gRPC pools
    assert max(rss[len(rss) // 4 :]) < warm + 150, rss
    assert figures["descriptors_end"] < 64, figures
    # hostile: links planted among the segments followed by nothing; recordings as long as allowed
    # end at the caps, their spool emptied
    assert figures["victim_untouched"], figures
    assert figures["recordings"] > 0 and figures["recording_failures"] == [] and figures["spool_left"] == 0, figures
    assert figures["recording_bytes_max"] <= (Soak.RECORD_MAX_MB << 20) + (1 << 20), figures
