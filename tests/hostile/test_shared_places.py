"""A local user who is not the producer's nor the daemon's plants links and folders where gpuobs
writes (the segment folder, the cubin folder, the runtime folder): nothing is ever written through
them, nothing of theirs is used, the refusal is said once, and the served process runs on."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuobs import _native
from gpuobs.segment import Segment
from gpuobs_testing.cubins import build_cubin
from gpuobs_testing.daemon import run_gpuobsd
from gpuobs_testing.hostile import HOSTILE_UID, as_hostile, victim_file
from gpuobs_testing.synth import synth_binary

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "two_modules_kernels.cu"
KERNEL = "_Z17plain_copy_kernelPKfPf"


def run_synth(segment_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [synth_binary(), "--segment-dir", str(segment_dir), "--launches", "5", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def unchanged(victim: Path) -> bool:
    return victim.read_text() == "the victim's own bytes\n" and victim.stat().st_uid == 0


def test_a_link_planted_for_the_segment_folder_is_not_followed(shared: Path, tmp_path: Path) -> None:
    victim = victim_file(tmp_path / "victims")
    as_hostile("ln", "-s", str(victim.parent), str(shared / "gpuobs"))
    done = run_synth(shared / "gpuobs")
    assert done.returncode == 1 and "segment directory refused" in done.stderr and "link" in done.stderr, done.stderr
    assert unchanged(victim) and sorted(p.name for p in victim.parent.iterdir()) == ["victim"]


def test_a_segment_folder_another_user_owns_is_refused(shared: Path) -> None:
    as_hostile("mkdir", "-m", "0777", str(shared / "theirs"))
    done = run_synth(shared / "theirs")
    assert done.returncode == 1 and f"owned by uid {HOSTILE_UID}" in done.stderr, done.stderr
    assert list((shared / "theirs").iterdir()) == []


def test_segments_in_a_sticky_shared_folder_are_made_beside_what_others_planted(shared: Path, tmp_path: Path) -> None:
    """The folder is everyone's (as /dev/shm): a producer still creates its segment there, whole
    and its own, and never through the links others left."""
    victim = victim_file(tmp_path / "victims")
    for name in ("gpuobs-1-1.seg", ".gpuobs-1-1.tmp", "gpuobs-cubins"):
        as_hostile("ln", "-s", str(victim), str(shared / name))
    done = run_synth(shared)
    assert done.returncode == 0, done.stderr
    mine = [p for p in shared.iterdir() if not p.is_symlink()]
    assert len(mine) == 1 and mine[0].stat().st_uid == 0 and Segment(mine[0], exclusive=False).pid > 0
    assert unchanged(victim)


def test_the_cubin_store_replaces_a_planted_link_as_a_name_and_never_writes_through_it(
    shared: Path, tmp_path: Path
) -> None:
    cubin = build_cubin(FIXTURE, tmp_path)
    victim = victim_file(tmp_path / "victims")
    name = _native.cubin_file_name(cubin.read_bytes())
    as_hostile("ln", "-s", str(victim), str(shared / name))
    segments = tmp_path / "segments"
    segments.mkdir()
    done = run_synth(
        segments,
        "--cubin",
        str(cubin),
        "--cubin-function",
        KERNEL,
        "--cubin-offsets",
        "0x10",
        env={"GPUOBS_CUBIN_DIR": str(shared)},
    )
    assert done.returncode == 0, done.stderr
    assert unchanged(victim)
    kept = shared / name
    assert not kept.is_symlink() and kept.stat().st_uid == 0 and kept.read_bytes() == cubin.read_bytes()


def test_a_cubin_folder_another_user_owns_or_links_keeps_nothing_and_says_why(shared: Path, tmp_path: Path) -> None:
    cubin = build_cubin(FIXTURE, tmp_path)
    victim = victim_file(tmp_path / "victims")
    as_hostile("mkdir", "-m", "0777", str(shared / "theirs"))
    as_hostile("ln", "-s", str(victim.parent), str(shared / "linked"))
    for folder, reason in ((shared / "theirs", f"owned by uid {HOSTILE_UID}"), (shared / "linked", "link")):
        segments = tmp_path / f"segments-{folder.name}"
        segments.mkdir()
        done = run_synth(
            segments,
            "--cubin",
            str(cubin),
            "--cubin-function",
            KERNEL,
            "--cubin-offsets",
            "0x10",
            env={"GPUOBS_CUBIN_DIR": str(folder)},
        )
        assert done.returncode == 0, done.stderr  # the process runs on
        assert "cubin not kept (cubin directory refused" in done.stderr and reason in done.stderr, done.stderr
        (segment,) = segments.iterdir()
        counters = Segment(segment, exclusive=False).counters()[0]
        assert (counters["cubins_kept"], counters["cubins_skipped"]) == (0, 1)
    assert list((shared / "theirs").iterdir()) == []
    assert unchanged(victim) and sorted(p.name for p in victim.parent.iterdir()) == ["victim"]


def test_the_old_default_cubin_name_beside_the_segments_is_not_used(shared: Path, tmp_path: Path) -> None:
    """Cubins were kept in <segment folder>/gpuobs-cubins by default, a name anyone could take in
    /dev/shm; the default is now the user's own cache folder."""
    import os

    cubin = build_cubin(FIXTURE, tmp_path)
    victim = victim_file(tmp_path / "victims")
    as_hostile("ln", "-s", str(victim.parent), str(shared / "gpuobs-cubins"))
    cache = tmp_path / "cache"
    done = run_synth(
        shared,
        "--cubin",
        str(cubin),
        "--cubin-function",
        KERNEL,
        "--cubin-offsets",
        "0x10",
        env={"XDG_CACHE_HOME": str(cache), "GPUOBS_CUBIN_DIR": ""},
    )
    assert done.returncode == 0, done.stderr
    kept = list((cache / "gpuobs" / "cubins").iterdir())
    assert [p.read_bytes() for p in kept] == [cubin.read_bytes()]
    assert stat_mode(cache / "gpuobs" / "cubins") == 0o700 and os.stat(cache).st_mode & 0o777 == 0o700
    assert unchanged(victim) and sorted(p.name for p in victim.parent.iterdir()) == ["victim"]


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def test_gpuobsd_refuses_a_runtime_folder_another_user_owns_and_writes_nothing_there(
    shared: Path, tmp_path: Path
) -> None:
    victim = victim_file(tmp_path / "victims")
    runtime = shared / "run"
    as_hostile("mkdir", "-m", "0755", str(runtime))
    as_hostile("ln", "-s", str(victim), str(runtime / "gpuobsd.lock"))
    done = run_gpuobsd(runtime, tmp_path)
    assert done.returncode == 1 and f"owned by uid {HOSTILE_UID}" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert unchanged(victim)


def test_gpuobsd_never_opens_its_lock_through_a_link_nor_uses_a_folder_others_may_write(tmp_path: Path) -> None:
    victim = victim_file(tmp_path / "victims")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o750)
    (runtime / "gpuobsd.lock").symlink_to(victim)
    done = run_gpuobsd(runtime, tmp_path)
    assert done.returncode == 1 and "symbolic link: not followed" in done.stderr, done.stderr
    assert unchanged(victim)
    (runtime / "gpuobsd.lock").unlink()
    runtime.chmod(0o777)
    done = run_gpuobsd(runtime, tmp_path)
    assert done.returncode == 1 and "writable by other users" in done.stderr, done.stderr
    assert not (runtime / "gpuobsd.lock").exists()


def test_a_parquet_dataset_another_user_planted_or_linked_is_refused_and_nothing_goes_through(
    shared: Path, tmp_path: Path
) -> None:
    """The dataset folder in a shared place: another user made it (with a link inside where a
    table goes), or planted a link by its name; export-parquet writes nothing anywhere."""
    import numpy as np
    from gpuobs.segment import EVENT_DTYPE, LAUNCH_DTYPE
    from gpuobs_testing.daemon import gpuobsctl
    from gpuobs_testing.event_files import write_event_file

    victim = victim_file(tmp_path / "victims")
    recording = write_event_file(tmp_path / "r.gpuobs", np.zeros(2, dtype=EVENT_DTYPE), np.zeros(0, dtype=LAUNCH_DTYPE))
    as_hostile("mkdir", "-m", "0777", str(shared / "theirs"))
    as_hostile("ln", "-s", str(victim.parent), str(shared / "theirs" / "events"))
    as_hostile("ln", "-s", str(victim.parent), str(shared / "linked"))
    for folder, why in (("theirs", f"owned by uid {HOSTILE_UID}"), ("linked", "a symbolic link: not followed")):
        done = gpuobsctl("unix:///nonexistent.sock", "export-parquet", str(recording), "--out", str(shared / folder))
        assert done.returncode == 1 and why in done.stderr, done.stderr
    assert unchanged(victim) and sorted(p.name for p in victim.parent.iterdir()) == ["victim"]
    assert sorted(p.name for p in (shared / "theirs").iterdir()) == ["events"]
