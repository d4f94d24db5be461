"""gpuobs-synth reads the injector's environment as the injector does, so that a deployment can be
rehearsed with it (deploy/README.md's walk-through): here GPUOBS_GROUP, which decides who may
read the segment."""

from __future__ import annotations

import grp
import os
import stat
import subprocess
from pathlib import Path

import pytest
from gpuobs.segment import segment_paths
from gpuobs_testing.synth import synth_binary


def run_synth(directory: Path, group: str | None) -> tuple[os.stat_result, str]:
    env = {key: value for key, value in os.environ.items() if key != "GPUOBS_GROUP"}
    if group is not None:
        env["GPUOBS_GROUP"] = group
    done = subprocess.run(
        [synth_binary(), "--segment-dir", str(directory), "--mode", "counter", "--launches", "10"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (segment,) = segment_paths(directory)
    return segment.stat(), done.stderr


def test_gpuobs_group_makes_the_segment_0660_with_that_group(tmp_path: Path) -> None:
    try:
        mine = grp.getgrgid(os.getgid()).gr_name
    except KeyError:
        pytest.skip("this process's group has no name here")
    info, _ = run_synth(tmp_path, mine)
    assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o660, os.getgid())


def test_without_it_or_with_an_unknown_group_the_segment_stays_0600(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    info, _ = run_synth(tmp_path / "plain", None)
    assert stat.S_IMODE(info.st_mode) == 0o600
    (tmp_path / "unknown").mkdir()
    info, stderr = run_synth(tmp_path / "unknown", "no-such-group-gpuobs")
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert "GPUOBS_GROUP=no-such-group-gpuobs: no such group" in stderr
