"""Every gpuobsd setting, defined once: name, default, GPUOBS_* environment twin, flag, help.

Precedence: built-in default < settings file (TOML, `--config`) < environment < flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .runtime_dir import SOCKET_NAME, socket_path_problem


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str

    @property
    def env(self) -> str:
        return "GPUOBS_" + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"not a share within 0..1: {text!r}")
    return value


def _count(low: int, high: int) -> Callable[[str], int]:
    """An integer within low..high (milliseconds, limits): every setting has a bound, so none can
    make the daemon wait forever or hold what a host does not have."""

    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be within {low}..{high}, not {value}")
        return value

    parse.__name__ = f"within_{low}_{high}"
    return parse


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


MAX_UID = 2**32 - 2  # (uid_t)-1 means "no uid"
MAX_OWNERS = 64


def _owners(text: str) -> str:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    for part in parts:
        if not part.isdigit() or int(part) > MAX_UID:
            raise ValueError(f"not a comma-separated list of uids (0..{MAX_UID}): {text!r}")
    if len(parts) > MAX_OWNERS:
        raise ValueError(f"at most {MAX_OWNERS} uids")
    return text


def _address(text: str) -> str:
    """HOST:PORT with a port in 1..65535, or '' (off)."""
    if not text:
        return text
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {text!r}")
    return text


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


SETTINGS: tuple[Setting, ...] = (
    Setting("runtime_dir", "/run/gpuobs", "directory of the control socket and the daemon lock"),
    Setting("segment_dir", "/dev/shm", "where injected processes create their segments"),
    Setting(
        "cubin_dir",
        "",
        "where injected processes keep module cubins, when this daemon sees that folder at "
        "another path than they do (default: the folder each process's segment names, its GPUOBS_CUBIN_DIR)",
    ),
    Setting("metrics_address", "127.0.0.1:9464", "HOST:PORT of the Prometheus endpoint ('' disables it)", _address),
    Setting(
        "listen",
        "",
        "extra gRPC address (e.g. 0.0.0.0:50061), read-only: queries and streams, no set-mode, "
        "record or op window; served over TLS to clients that present the token (--tls-cert, --tls-key and "
        "--token-file are required with it); the unix socket is always served",
    ),
    Setting("tls_cert", "", "PEM certificate (chain) the --listen port presents"),
    Setting("tls_key", "", "PEM private key of --tls-cert"),
    Setting(
        "token_file",
        "",
        "file holding the token a --listen client must send (authorization: Bearer TOKEN; at least 16 characters)",
    ),
    Setting("socket_group", "gpuobs", "group given the control socket (0660) when it exists"),
    Setting("drain_interval_ms", 2, "pause between drain passes when nothing was read", _count(0, 1000)),
    Setting("discovery_interval_ms", 200, "how often the segment directory is scanned", _count(1, 60_000)),
    Setting("torn_timeout_ms", 1000, "a claimed slot unfinished this long is skipped as torn", _count(1, 3_600_000)),
    Setting(
        "exited_retention_s",
        300,
        "how long an exited process's final counts stay shown (status, metrics) after "
        "its final drain; then its segment is deleted and the process forgotten (0: at once)",
        _count(0, 30 * 86400),
    ),
    Setting(
        "request_keep",
        4096,
        "requests each process keeps (gpuobsctl requests, ListRequests) after their last step, "
        "the least recently scheduled let go first",
        _count(1, 1_000_000),
    ),
    Setting(
        "request_keep_s",
        3600,
        "how long a request stays kept after its last step (host clock of its process's newest step)",
        _count(1, 30 * 86400),
    ),
    Setting(
        "exited_max",
        32,
        "exited processes kept at most (the oldest forgotten first, before their retention is "
        "over): a service restarting in a loop leaves a bounded trail",
        _count(0, 4096),
    ),
    Setting(
        "kernel_label_limit",
        20,
        "kernels with counter series of their own per identity (host, GPU, model, rank, pod), re-ranked by "
        "recent device time or blocks; the rest are summed in kernel='other' (docs/metrics.md: the series budget)",
        _count(0, 1000),
    ),
    Setting(
        "kernel_histogram_limit",
        8,
        "kernels with a block-duration histogram of their own per identity (14 series each); the rest in 'other'",
        _count(0, 1000),
    ),
    Setting(
        "kernel_rerank_s",
        60,
        "how often the kernels named in metrics are re-ranked (a place changes hands only then, to a kernel "
        "with twice the holder's score over that window)",
        _count(1, 86_400),
    ),
    Setting(
        "series_grace_s",
        1800,
        "how long an identity's series stay after its last process was forgotten (a restart of the same rank "
        "within it continues them); then they end",
        _count(0, 7 * 86_400),
    ),
    Setting(
        "analysis_share",
        0.3,
        "share of the daemon's time for joining graph replays to events and pairing "
        "block enters with exits (0 turns both off; counts stay exact)",
        _share,
    ),
    Setting(
        "hang_threshold_ms",
        10000,
        "blocks in flight this long are reported once per launch as a suspected hang "
        "(needs GPUOBS_BLOCK_EXIT=1 in the observed process)",
        _count(1, 86_400_000),
    ),
    Setting(
        "watchdog_stall_ms",
        5000,
        "a drain that finished no pass this long is said to stall (a log line, the "
        "status line, gpuobs_drain_stalled); the daemon answers on and the systemd watchdog is fed",
        _count(1, 3_600_000),
    ),
    Setting(
        "record_max_mb",
        1024,
        "disk one recording may fill (its files together); reached, it ends with what it wrote and says so",
        _count(1, 1 << 20),
    ),
    Setting("record_total_mb", 4096, "disk all recordings running at once may fill", _count(1, 1 << 22)),
    Setting(
        "spool_dir",
        "",
        "where a recording streamed to its client is written first (default: <runtime dir>/spool; "
        "a folder of this daemon's own, emptied at start)",
    ),
    Setting(
        "log_format",
        "auto",
        "json, console, or auto (console on a terminal, JSON otherwise)",
        _choice("json", "console", "auto"),
    ),
    Setting("owners", "", "comma-separated uids whose segments are trusted (default: ours and root)", _owners),
)


@dataclasses.dataclass
class Config:
    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError as missing:
            raise AttributeError(name) from missing

    @property
    def socket_path(self) -> Path:
        return Path(self.values["runtime_dir"]) / SOCKET_NAME

    @property
    def spool_path(self) -> Path:
        return Path(self.values["spool_dir"] or Path(self.values["runtime_dir"]) / "spool")

    @property
    def owner_uids(self) -> list[int]:
        text = self.values["owners"]
        return [int(part) for part in text.split(",") if part.strip()] if text else []


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="settings file (TOML); flags and GPUOBS_* variables override it")
    for setting in SETTINGS:
        parser.add_argument(
            setting.flag,
            dest=setting.name,
            default=None,
            help=f"{setting.help} [{setting.env}, default {setting.default!r}]",
        )


def resolve(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    """Default, then file, then environment, then flags. Raises ValueError naming the setting."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    values = {setting.name: setting.default for setting in SETTINGS}
    by_name = {setting.name: setting for setting in SETTINGS}
    config_file = getattr(args, "config", None) or env.get("GPUOBS_CONFIG")
    if config_file:
        with open(config_file, "rb") as handle:
            try:
                table = tomllib.load(handle)
            except tomllib.TOMLDecodeError as error:
                raise ValueError(f"{config_file}: {error}") from error
            for name, value in table.items():
                if name not in by_name:
                    raise ValueError(f"{config_file}: unknown setting {name!r}")
                if isinstance(value, (dict, list)):
                    raise ValueError(f"{config_file}: {name} must be a single value")
                as_text = str(value).lower() if isinstance(value, bool) else str(value)
                try:  # the same parser a flag goes through: the same checks
                    values[name] = by_name[name].parse(as_text)
                except ValueError as error:
                    raise ValueError(f"{config_file}: {name} = {value!r}: {error}") from error
    for setting in SETTINGS:
        layers = [(setting.env, env.get(setting.env)), (setting.flag, getattr(args, setting.name, None))]
        for source, text in layers:
            if text is None:
                continue
            try:
                values[setting.name] = setting.parse(text)
            except ValueError as error:
                raise ValueError(f"{source}={text!r}: {error}") from error
    for folder in ("runtime_dir", "segment_dir", "spool_dir", "cubin_dir"):  # a relative one: from where it started
        if values.get(folder):
            values[folder] = os.path.abspath(values[folder])
    problem = socket_path_problem(Path(values["runtime_dir"]))
    if problem:
        raise ValueError(f"--runtime-dir: {problem}")
    if values["listen"]:
        missing = [f"--{name.replace('_', '-')}" for name in ("tls_cert", "tls_key", "token_file") if not values[name]]
        if missing:
            raise ValueError(
                f"--listen needs {', '.join(missing)}: a TCP port is reachable by others, so it is "
                f"served only over TLS to clients that present a token"
            )
    return Config(values)
