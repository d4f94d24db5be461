"""gpuobsd: finds the segments of injected processes, drains them continuously, answers the
gRPC API on a unix socket and exports Prometheus metrics."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

import grpc
import structlog
from gpuobs import version_line
from gpuobs.api.v1 import observer_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from . import logging_setup, reflection, settings, systemd, tcp_access
from .drain_thread import DrainThread
from .grpc_api import MAX_MESSAGE_BYTES, ObserverServicer, add_to_server
from .metrics import GpuobsCollector
from .metrics_server import SharedExposition, serve
from .recording_budget import RecordingBudget
from .registry import Registry
from .request_ledger import RequestRetention
from .runtime_dir import AlreadyRunning, RuntimeDir, prepare_spool
from .service import ObserverService

log = structlog.get_logger("gpuobsd")
SERVICE_NAME = observer_pb2.DESCRIPTOR.services_by_name["Observer"].full_name


class Daemon:
    def __init__(self, config: settings.Config) -> None:
        self.config = config
        self.registry = Registry(
            Path(config.segment_dir),
            owners=config.owner_uids,
            torn_timeout_s=config.torn_timeout_ms / 1000.0,
            exited_retention_s=float(config.exited_retention_s),
            exited_max=config.exited_max,
            hang_threshold_s=config.hang_threshold_ms / 1000.0,
            analysis_share=config.analysis_share,
            request_retention=RequestRetention(config.request_keep, float(config.request_keep_s)),
        )
        self.service = ObserverService(
            self.registry,
            config.segment_dir,
            config.cubin_dir or None,
            RecordingBudget(config.record_max_mb << 20, config.record_total_mb << 20),
            config.spool_path,
        )
        self.stop = asyncio.Event()
        self.health = health.aio.HealthServicer()

    async def run(self) -> int:
        metrics_at = self._start_metrics()  # first: a taken port ends the start before anything is served
        server = self._server(read_only=False)
        socket_path = self.config.socket_path
        socket_path.unlink(missing_ok=True)  # ours to replace: we hold the runtime dir's lock
        server.add_insecure_port(f"unix://{socket_path}")
        servers = [server]
        if self.config.listen:  # a server of its own: its servicer refuses what changes anything, and
            # only clients with the token get that far, over TLS
            token = tcp_access.read_token(self.config.token_file)
            credentials = tcp_access.server_credentials(self.config.tls_cert, self.config.tls_key)
            servers.append(self._server(read_only=True, interceptors=[tcp_access.TokenCheck(token)]))
            try:
                servers[-1].add_secure_port(self.config.listen, credentials)
            except RuntimeError as error:  # grpc's way of saying it could not bind
                raise OSError(f"cannot listen on {self.config.listen} (--listen): {error}") from None
        for each in servers:
            await each.start()
        applied = RuntimeDir.secure_socket(socket_path, self.config.socket_group)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop.set)
        drain = DrainThread(
            self.registry,
            discovery_interval_s=self.config.discovery_interval_ms / 1000.0,
            drain_interval_s=self.config.drain_interval_ms / 1000.0,
        )
        drain.start()
        watch = asyncio.create_task(self._watch())
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "ready",
            socket=str(socket_path),
            socket_mode=applied,
            metrics=metrics_at,
            segment_dir=self.config.segment_dir,
        )
        systemd.notify("READY=1")
        systemd.notify(f"STATUS={self._status_line(self.service.drain_age_seconds())}")
        await self.stop.wait()
        systemd.notify("STOPPING=1")
        log.info("stopping")
        watch.cancel()
        for each in servers:
            await each.stop(grace=1.0)
        drain.stop()
        self.service.close()
        return 0

    def _server(self, *, read_only: bool, interceptors: list | None = None) -> grpc.aio.Server:
        server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)], interceptors=interceptors or []
        )
        add_to_server(ObserverServicer(self.service, read_only=read_only), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        # under grpc.reflection.v1 and v1alpha both (reflection.py): grpcurl asks v1 first
        reflection.enable_server_reflection([SERVICE_NAME, health.SERVICE_NAME], server)
        return server

    def _start_metrics(self) -> str:
        address = self.config.metrics_address
        if not address:
            return "off"
        host, _, port = address.rpartition(":")
        registry = CollectorRegistry()
        registry.register(
            GpuobsCollector(
                self.service,
                self.config.kernel_label_limit,
                self.config.watchdog_stall_ms / 1000.0,
                histogram_limit=self.config.kernel_histogram_limit,
                rerank_s=float(self.config.kernel_rerank_s),
                grace_s=float(self.config.series_grace_s),
            )
        )
        # the daemon's own process: CPU, memory, file descriptors, Python and its collector
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        try:
            serve(SharedExposition(registry), host or "127.0.0.1", int(port))
        except OSError as error:
            raise OSError(error.errno, f"cannot serve metrics on {address}: {error.strerror}") from error
        return address

    def _stalled(self, lag: float) -> bool:
        return self.service.drain_stalled(self.config.watchdog_stall_ms / 1000.0)

    def _status_line(self, lag: float) -> str:
        """What `systemctl status gpuobsd` shows on its Status: line (`lag`: since the drain's
        last pass)."""
        if self._stalled(lag):
            return f"drain stalled for {lag:.0f} s"
        processes = list(self.registry.processes.values())
        alive = sum(p.alive for p in processes)
        return f"observing {alive} process(es) ({len(processes) - alive} exited kept)"

    async def _watch(self) -> None:
        """Liveness apart from progress: this loop turning is what answers the API, so it feeds
        the systemd watchdog whatever the drain does. A drain that stalls (a starved host: 13.7 s
        and 49.7 s were seen) is said, not restarted (a restart would lose every analysis): one log
        line when it stalls and when it resumes, systemd's status line, and the metrics
        (gpuobs_drain_stalled, gpuobs_drain_lag_seconds)."""
        interval = systemd.watchdog_interval_s() or 1.0
        stalled = False
        shown = ""
        while True:
            lag = self.service.drain_age_seconds()
            line = self._status_line(lag)
            if line != shown:
                shown = line
                systemd.notify(f"STATUS={line}")
            if self._stalled(lag) != stalled:
                stalled = not stalled
                log.warning("drain_stalled", lag_s=round(lag, 1)) if stalled else log.info("drain_resumed")
            systemd.notify("WATCHDOG=1")
            await asyncio.sleep(min(interval / 2, 1.0))


EXAMPLES = """Every flag can also come from its GPUOBS_* variable (named after its help) or a --config
TOML file; flags win, then the environment, then the file.

examples:
  gpuobsd                                   # as the systemd unit runs it: /run/gpuobs, /dev/shm, :9464
  gpuobsd --runtime-dir /tmp/g --segment-dir /tmp/g/seg --metrics-address 127.0.0.1:19464
  gpuobsd --listen 0.0.0.0:50051 --tls-cert cert.pem --tls-key key.pem --token-file token
  GPUOBS_LOG_FORMAT=console gpuobsd --config /etc/gpuobs/gpuobsd.toml"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuobsd",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line("gpuobsd"))
    settings.add_arguments(parser)
    return parser


def configured(argv: list[str] | None = None) -> settings.Config:
    """The settings these flags, the environment and a settings file give; ValueError or
    OSError for any that cannot be taken (a deployment's flags are checked this way too)."""
    return settings.resolve(build_parser().parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    try:
        config = configured(argv)
    except (ValueError, OSError) as error:
        print(f"gpuobsd: {error}", file=sys.stderr)
        return 2
    logging_setup.configure(config.log_format)
    if not Path(config.segment_dir).is_dir():
        print(f"gpuobsd: segment directory {config.segment_dir} does not exist (--segment-dir)", file=sys.stderr)
        return 2
    runtime = RuntimeDir(Path(config.runtime_dir))
    try:
        runtime.acquire()
    except AlreadyRunning as error:
        print(f"gpuobsd: another daemon is running: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"gpuobsd: cannot use runtime directory {config.runtime_dir}: {error}", file=sys.stderr)
        return 1
    try:
        prepare_spool(config.spool_path)  # after the lock: no other daemon is streaming from it
    except OSError as error:
        print(f"gpuobsd: cannot use spool directory {config.spool_path} (--spool-dir): {error}", file=sys.stderr)
        return 1
    try:
        import uvloop

        return uvloop.run(Daemon(config).run())
    except (OSError, ValueError) as error:  # a port that cannot be bound, a TLS file or token not usable
        print(f"gpuobsd: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
