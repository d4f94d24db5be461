"""Standard gRPC health and reflection, and systemd's notify protocol (READY, WATCHDOG, STOPPING)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from gpuobs_testing.daemon import free_port
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc


def test_health_and_reflection_answer(start_daemon) -> None:
    daemon = start_daemon()
    channel = grpc.insecure_channel(daemon.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "gpuobs.v1.Observer"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for s in next(responses).list_services_response.service}
    assert "gpuobs.v1.Observer" in names and "grpc.health.v1.Health" in names


def test_sd_notify_ready_watchdog_stopping(tmp_path: Path, segment_dir: Path) -> None:
    notify_path = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    listener.settimeout(20)
    env = dict(os.environ, NOTIFY_SOCKET=str(notify_path), WATCHDOG_USEC="400000")
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuobs.daemon.main",
            "--runtime-dir",
            str(tmp_path / "run"),
            "--segment-dir",
            str(segment_dir),
            "--metrics-address",
            f"127.0.0.1:{free_port()}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        messages = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
            any("READY=1" in m for m in messages) and sum("WATCHDOG=1" in m for m in messages) >= 2
        ):
            messages.append(listener.recv(4096).decode())
        assert messages[0] == "READY=1" or "READY=1" in messages
        assert sum("WATCHDOG=1" in m for m in messages) >= 2
        assert "STATUS=observing 0 process(es) (0 exited kept)" in messages, messages  # `systemctl status`'s line
        daemon.send_signal(signal.SIGTERM)
        while "STOPPING=1" not in messages:
            messages.append(listener.recv(4096).decode())
        assert daemon.wait(timeout=20) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
        listener.close()
