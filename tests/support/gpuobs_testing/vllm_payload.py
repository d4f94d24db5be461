"""The environment of an offline vLLM on the GPU machine, shared by the vLLM benchmarks and the
vLLM tests: the payload's site folder (an offline vLLM 0.25.1 in chunk folders that
device_unpack.sh joins), a random-weight Qwen3 made on the spot, and the drop-in's variables."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path


def payload_environment(payload: Path) -> dict[str, str]:
    """PYTHONPATH of the unpacked vLLM payload (device_unpack.sh --env prints an export line)."""
    done = subprocess.run(
        ["bash", str(payload / "device_unpack.sh"), str(payload), "--env"], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"vLLM payload not ready: {done.stdout[-500:]} {done.stderr[-500:]}")
    match = re.search(r"export PYTHONPATH=([^$\s]+)", done.stdout)
    if not match:
        raise SystemExit(f"no PYTHONPATH from device_unpack.sh: {done.stdout[-500:]}")
    site = match.group(1)
    return {"PYTHONPATH": site + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}


def offline_environment(payload: Path) -> dict[str, str]:
    """This process's environment with the payload on the path, vLLM offline and quiet, and no
    injector (each configuration adds its own)."""
    env = {
        **os.environ,
        **payload_environment(payload),
        "VLLM_USE_FLASHINFER_SAMPLER": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("CUDA_INJECTION64_PATH", None)
    return env


def drop_in_environment(path: Path) -> dict[str, str]:
    """The Environment= lines of a systemd drop-in ('%%' is systemd's escaped '%')."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("Environment="):
            for item in shlex.split(line[len("Environment=") :]):
                key, _, value = item.partition("=")
                env[key] = value.replace("%%", "%")
    return env


def make_model(
    payload: Path,
    where: Path,
    env: dict[str, str],
    shape: list[str] | None = None,
    *,
    by_copies: bool = False,
    geometry: dict[str, int] | None = None,
) -> bool:
    """A random-weight Qwen3 at `where` (make_tiny_qwen3.py's --layers/--hidden/--vocab in
    `shape`), unless one is there already; True when it was made now. `by_copies`: made with one
    layer, then every layer a copy of it (deepen_model.py: minutes less for 32 x 5120). `geometry`:
    config fields that make_tiny_qwen3.py has no flag for (heads, KV heads, head size, MLP width,
    vocabulary), set on that one layer with its tensors made afresh before it is copied (a
    production model's shape; implies by_copies). A failure leaves nothing."""
    if where.exists():
        return False
    shape = list(shape or [])
    layers = int(shape[shape.index("--layers") + 1]) if "--layers" in shape else 0
    deepen = (by_copies or bool(geometry)) and layers > 1
    made = list(shape)
    if deepen:
        made[shape.index("--layers") + 1] = "1"
    try:
        subprocess.run(
            [sys.executable, str(payload / "make_tiny_qwen3.py"), str(where), *made],
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )
        if deepen or geometry:
            fields = [f"{field}={value}" for field, value in (geometry or {}).items()]
            depth = str(layers if deepen else 1)
            subprocess.run(
                [sys.executable, "-m", "gpuobs_testing.deepen_model", str(where), depth, *fields],
                env=env,
                check=True,
                capture_output=True,
                timeout=600,
            )
    except BaseException:
        shutil.rmtree(where, ignore_errors=True)  # made again next time, never half
        raise
    return True
