"""A client that asks for recordings as long and as many as it may cannot fill the disk: a
recording ends at gpuobsd's cap per recording or its cap for all at once, keeps what it wrote
(whole records, a readable file) and says why; streamed recordings are written first in a folder
of the daemon's own, which it empties at start."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from gpuobs.recording import HEADER_BYTES, Recording
from gpuobs_testing.daemon import gpuobsctl

MIB = 1 << 20


def busy_producer(start_synth):
    return start_synth("--mode", "blocks", "--rate", "4000000", "--kernels", "6", "--ring-records", str(1 << 18))


def test_a_recording_ends_at_the_cap_per_recording_and_keeps_what_it_wrote(
    start_synth, start_daemon, tmp_path: Path
) -> None:
    busy_producer(start_synth)
    daemon = start_daemon("--record-max-mb", "1")
    daemon.wait_processes(1)
    for on_daemon in (True, False):
        out = tmp_path / f"capped-{on_daemon}.gpuobs"
        done = gpuobsctl(
            daemon.address,
            "--output",
            "json",
            "record",
            "--duration",
            "30",
            *(["--on-daemon"] if on_daemon else []),
            str(out),
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout)["files"]
        assert "the cap of 1048576 bytes per recording was reached" in row["stopped"], row
        recording = Recording.open(out)  # whole, readable
        assert len(recording.events) == row["events"] > 0
        assert len(recording.events) * 64 + len(recording.launches) * 128 <= MIB
        assert out.stat().st_size <= MIB + HEADER_BYTES + 64 * 1024  # the header and kernel table beside
    text = gpuobsctl(daemon.address, "record", "--duration", "30", str(tmp_path / "said.gpuobs"), timeout=60)
    assert "the recording ended early: the cap of 1048576 bytes" in text.stdout, text.stdout


def test_recordings_at_once_share_one_cap(start_synth, start_daemon, tmp_path: Path) -> None:
    busy_producer(start_synth)
    daemon = start_daemon("--record-max-mb", "64", "--record-total-mb", "2")
    daemon.wait_processes(1)
    answers: list[dict] = []

    def record(index: int) -> None:
        done = gpuobsctl(
            daemon.address,
            "--output",
            "json",
            "record",
            "--duration",
            "20",
            str(tmp_path / f"shared-{index}.gpuobs"),
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        answers.extend(json.loads(done.stdout)["files"])

    threads = [threading.Thread(target=record, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 3
    assert any("all recordings together reached gpuobsd's cap of 2097152 bytes" in a["stopped"] for a in answers)
    assert all(a["events"] * 64 <= 2 * MIB for a in answers) and any(a["events"] for a in answers)
    # one that found the cap for all taken by the others ended at once, and says why
    assert all(a["stopped"] for a in answers if not a["events"])


def test_the_spool_is_the_daemons_own_and_emptied_at_start(start_daemon, runtime_dir: Path, tmp_path: Path) -> None:
    spool = runtime_dir / "spool"
    spool.mkdir(parents=True, mode=0o700)
    left = spool / "gpuobs-record-left"
    left.mkdir()
    (left / "recording.gpuobs").write_bytes(b"x" * 1000)
    victim = tmp_path / "victim"
    victim.write_text("kept\n")
    (spool / "link").symlink_to(victim)
    daemon = start_daemon()
    daemon.status()
    assert list(spool.iterdir()) == [] and victim.read_text() == "kept\n"
    assert os.stat(spool).st_mode & 0o777 == 0o700
