"""Discovery in-process (a Registry over a directory, no daemon): what it remembers of files it
cannot attach is bounded, and a real segment still attaches among any number of them."""

from __future__ import annotations

import os
from pathlib import Path

from gpuobs import _native
from gpuobs.daemon import registry as registry_module
from gpuobs.daemon.registry import Registry
from gpuobs.daemon.service import ObserverService


def test_rejected_files_are_remembered_up_to_a_cap_and_forgotten_once_gone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(registry_module, "MAX_REJECTED", 16)
    monkeypatch.setattr(registry_module, "MAX_TRIES_PER_PASS", 8)
    junk = [tmp_path / f"gpuobs-{1000 + index}-1.seg" for index in range(50)]
    for path in junk:
        path.write_bytes(b"junk" * 64)
    registry = Registry(tmp_path, owners=[os.getuid()], torn_timeout_s=1.0)
    writer = _native.Writer(str(tmp_path))  # sorts after every junk file: attaches in its turn
    for _ in range(8):  # 51 files, 8 a pass: each had its turn
        registry.discover()
        assert len(registry.rejected) <= 16
    assert [p.path for p in registry.processes.values()] == [Path(writer.path)]
    assert registry.unattached == 50 and len(registry.rejected) == 16
    # 64 tries: one attached, 16 remembered, every other one a rejection counted and not remembered
    assert registry.rejected_forgotten == 8 * 8 - 1 - 16
    service = ObserverService(registry, str(tmp_path))
    try:
        status = service.status()
    finally:
        service.close()
    assert (len(status.rejected_segments), status.rejected_segments_total) == (16, 50)
    assert status.rejected_segments_forgotten == 47
    for path in junk[:40]:
        path.unlink()
    registry.discover()
    assert registry.unattached == 10 and len(registry.rejected) <= 10
    assert all(path.exists() for path in registry.rejected)
