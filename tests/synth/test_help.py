"""gpuobs-synth --help describes every flag its option table takes, so a CPU test or a walk-through
can be read without its source."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gpuobs_testing.synth import synth_binary

ROOT = Path(__file__).resolve().parents[2]


def test_help_describes_every_flag_of_the_option_table() -> None:
    table = re.findall(r'\{"([a-z-]+)", (?:no|required)_argument', (ROOT / "synth" / "options.cpp").read_text())
    assert len(table) > 30
    shown = subprocess.run([str(synth_binary()), "--help"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and "example:" in shown.stdout
    missing = [flag for flag in table if not re.search(rf"--{flag}\b", shown.stdout.split("\n\n", 1)[1])]
    assert not missing, missing
