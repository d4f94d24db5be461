"""A soak of the daemon: producers that come and go, hostile files in the segment directory,
fuzzed gRPC requests, scrapes and streams, all at once, for a while; what was seen comes back
as one dict (the CI test and bench/soak.py judge and print it).

Everything talks to the daemon's unix socket and its loopback metrics port only."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import grpc
from google.protobuf.message import Message
from gpuobs.api.v1 import observer_pb2 as pb
from gpuobs.api.v1.observer_pb2_grpc import ObserverStub

from gpuobs_testing.daemon import DaemonProcess, free_port, rss_mib
from gpuobs_testing.synth import synth_binary

# what a request that does not make sense may be answered; UNKNOWN or INTERNAL mean the daemon
# failed on it (an exception it did not expect), and the soak counts them as failures
ANSWERS_ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.FAILED_PRECONDITION,
}


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclasses.dataclass
class Soak:
    segment_dir: Path
    runtime_dir: Path
    seconds: float
    lifetimes: int  # stop once this many producers have come and gone (or the time is up)
    concurrent: int = 4
    exited_max: int = 8
    seed: int = 1
    JUNK_KEPT = 300
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    figures: dict = dataclasses.field(
        default_factory=lambda: {
            "lifetimes": 0,
            "producer_failures": 0,
            "junk_files": 0,
            "fuzzed_requests": 0,
            "fuzz_failures": [],
            "scrapes": 0,
            "scrape_failures": 0,
            "streams": 0,
            "stream_events": 0,
            "stream_failures": [],
            "series_max": 0,
            "rss_mib": [],
            "descriptors_max": 0,
            "status_bytes_max": 0,
            "recordings": 0,
            "recordings_capped": 0,
            "recording_bytes_max": 0,
            "recording_failures": [],
        }
    )
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @property
    def victim(self) -> Path:
        """A file beside the segment folder that planted links point at: it must stay as it is."""
        return self.segment_dir.parent / "victim"

    # -- the load ----------------------------------------------------------------------------
    def producers(self) -> None:
        rng = random.Random(self.seed)
        binary = synth_binary()
        running: list[subprocess.Popen] = []
        crash_asked: set[subprocess.Popen] = set()  # started with --crash-after: a signal ends them
        while not self.stop.is_set() and self.figures["lifetimes"] < self.lifetimes:
            while len(running) < self.concurrent and not self.stop.is_set():
                mode = rng.choice(["counter", "blocks", "memory", "sampled", "noop"])
                args = [
                    binary,
                    "--segment-dir",
                    str(self.segment_dir),
                    "--mode",
                    mode,
                    "--kernels",
                    str(rng.choice([2, 16, 200])),
                    "--rate",
                    str(rng.choice([20000, 200000])),
                    "--duration",
                    f"{rng.uniform(0.1, 0.6):.2f}",
                    "--ring-records",
                    "4096",
                ]
                crashes = rng.random() < 0.1
                if crashes:
                    args += ["--crash-after", str(rng.randint(100, 5000))]  # dies without unmapping
                try:
                    running.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    if crashes:
                        crash_asked.add(running[-1])
                except (OSError, RuntimeError):  # the producer could not start: counted, the soak goes on
                    with self.lock:
                        self.figures["producer_failures"] += 1
                    time.sleep(0.5)
            time.sleep(0.02)
            for process in [p for p in running if p.poll() is not None]:
                running.remove(process)
                crashed_as_asked = process in crash_asked
                crash_asked.discard(process)
                with self.lock:
                    self.figures["lifetimes"] += 1
                    # a crash asked for ends in a signal; any other failure is one
                    if process.returncode not in (0, -6, -9, -11, 134, 137, 139) and not crashed_as_asked:
                        self.figures["producer_failures"] += 1
        for process in running:
            process.wait()
            self.figures["lifetimes"] += 1
        self.stop.set()

    def junk(self) -> None:
        """Files a hostile local user (or a broken producer) leaves in the directory; the oldest
        go again past JUNK_KEPT (as a cleanup job would), so that the daemon's memory is judged
        against a directory of bounded size."""
        rng = random.Random(self.seed + 1)
        index = 0
        kept: list[Path] = []
        while not self.stop.wait(0.1):
            if len(kept) >= self.JUNK_KEPT:
                kept.pop(0).unlink(missing_ok=True)
            index += 1
            path = self.segment_dir / f"gpuobs-{900000 + index}-{rng.randrange(1 << 30)}.seg"
            kind = rng.choice(["random", "empty", "header", "huge-name", "link"])
            if kind == "huge-name":
                path = self.segment_dir / f"gpuobs-{900000 + index}-{'n' * 230}.seg"
            if kind == "link":  # planted where a segment would be: never followed, never written through
                path.symlink_to(self.victim)
            else:
                data = {
                    "random": rng.randbytes(rng.randrange(1, 8192)),
                    "empty": b"",
                    "header": b"GPUOBSSG" + rng.randbytes(rng.randrange(0, 600)),
                    "huge-name": b"x",
                }[kind]
                path.write_bytes(data)
            kept.append(path)
            with self.lock:
                self.figures["junk_files"] += 1
                self.figures["junk_now"] = len(kept)

    def fuzz(self, address: str) -> None:
        """Random bytes, and random field values of real messages, to every method."""
        rng = random.Random(self.seed + 2)
        channel = grpc.insecure_channel(address)
        service = pb.DESCRIPTOR.services_by_name["Observer"]
        methods = list(service.methods)
        while not self.stop.is_set():
            method = rng.choice(methods)
            path = f"/{service.full_name}/{method.name}"
            if rng.random() < 0.5:
                body = rng.randbytes(rng.randrange(0, 64))
            else:
                body = self._random_message(getattr(pb, method.input_type.name), rng).SerializeToString()
            try:
                if method.server_streaming:
                    # no serializers: the body goes as it is, the replies come back as bytes
                    raw_stream: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(path)
                    call = raw_stream(body, timeout=2)
                    for index, _ in enumerate(call):
                        if index >= 2:
                            call.cancel()
                            break
                else:
                    raw_unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
                    raw_unary(body, timeout=5)
                code = grpc.StatusCode.OK
            except grpc.RpcError as error:
                code = error.code()
            with self.lock:
                self.figures["fuzzed_requests"] += 1
                if code not in ANSWERS_ALLOWED and code != grpc.StatusCode.CANCELLED:
                    self.figures["fuzz_failures"].append(f"{method.name}: {code}")
        channel.close()

    def _random_message(self, message_class: type[Message], rng: random.Random) -> Message:
        """A message of that type with random values in its scalar fields (paths stay under the
        soak's own directory: a valid Record writes only there)."""
        message = message_class()
        for field in message_class.DESCRIPTOR.fields:
            if field.message_type is not None or rng.random() < 0.4:
                continue
            values = {
                field.TYPE_STRING: lambda: rng.choice(
                    [
                        "",
                        "blocks",
                        "sampled",
                        "x" * rng.randrange(1, 3000),
                        "(.+.+)+!",
                        "k1.1.2.3",
                        "g1.1.2.3",
                        "s1.1.2.3.4",
                        "k1.\u00b2.1.1",
                        "nul\0byte",
                        str(self.runtime_dir / "nul\0.gpuobs"),
                        str(self.runtime_dir / f"fuzz-{rng.randrange(1 << 20)}.gpuobs"),
                        "\udcff".encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                    ]
                ),
                field.TYPE_BOOL: lambda: rng.random() < 0.5,
                field.TYPE_UINT32: lambda: rng.choice([0, 1, 31, 32, 1000, (1 << 32) - 1]),
                field.TYPE_UINT64: lambda: rng.choice([0, 1, 100, (1 << 64) - 1]),
                field.TYPE_INT64: lambda: rng.choice([0, -1, 1 << 40]),
            }
            make = values.get(field.type)
            if make is None:
                continue
            value = make()
            if field.is_repeated:  # (protobuf's floor, 6.31.1, has it; `label` is gone from the newest)
                getattr(message, field.name).extend([value] * rng.randrange(1, 4))
            else:
                setattr(message, field.name, value)
        # a valid Record stays short, so that the soak's own recordings stay small
        if isinstance(message, pb.RecordRequest):
            if message.duration_ms > 2000:
                message.duration_ms = 2000
            if message.max_events > 100_000:
                message.max_events = 100_000
        return message

    RECORD_MAX_MB = 4  # the daemon's caps in the soak: recordings reach them every time
    RECORD_TOTAL_MB = 8

    def recordings(self, stub: ObserverStub) -> None:
        """Recordings as long as the daemon allows, two at a time, streamed back: each ends at a
        cap with what it wrote; the bytes never pass the caps."""

        def record() -> None:
            received, stopped = 0, ""
            try:
                for chunk in stub.RecordStream(pb.RecordRequest(duration_ms=3000), timeout=60):
                    received += len(chunk.data)
                    if chunk.HasField("file") and chunk.file.stopped:
                        stopped = chunk.file.stopped
            except grpc.RpcError as error:
                if error.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED):
                    with self.lock:
                        self.figures["recording_failures"].append(str(error.code()))
                return
            with self.lock:
                self.figures["recordings"] += 1
                self.figures["recordings_capped"] += bool(stopped)
                self.figures["recording_bytes_max"] = max(self.figures["recording_bytes_max"], received)

        while not self.stop.is_set():
            pair = [threading.Thread(target=record) for _ in range(2)]
            for thread in pair:
                thread.start()
            for thread in pair:
                thread.join()

    def scrapes(self, port: int) -> None:
        while not self.stop.wait(0.3):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                    text = response.read().decode()
                series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
                with self.lock:
                    self.figures["scrapes"] += 1
                    self.figures["series_max"] = max(self.figures["series_max"], series)
            except OSError:
                with self.lock:
                    self.figures["scrape_failures"] += 1

    def streams(self, stub: ObserverStub) -> None:
        while not self.stop.is_set():
            try:
                for batch in stub.StreamEvents(pb.StreamEventsRequest(max_events=2000), timeout=3):
                    with self.lock:
                        self.figures["stream_events"] += batch.count
            except grpc.RpcError as error:
                # no live process (NOT_FOUND), or none made 2000 events within the deadline
                if error.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DEADLINE_EXCEEDED):
                    with self.lock:
                        self.figures["stream_failures"].append(str(error.code()))
            with self.lock:
                self.figures["streams"] += 1

    def watch(self, daemon: DaemonProcess) -> None:
        while not self.stop.wait(1.0):
            try:
                status = daemon.status()
            except grpc.RpcError as error:  # a status that fails is a finding, not the end of the sampling
                with self.lock:
                    self.figures["fuzz_failures"].append(f"status: {error.code()}")
                continue
            with self.lock:
                self.figures["rss_mib"].append(round(rss_mib(daemon.process.pid), 1))
                self.figures["descriptors_max"] = max(self.figures["descriptors_max"], descriptors(daemon.process.pid))
                self.figures["status_bytes_max"] = max(self.figures["status_bytes_max"], status.ByteSize())

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> dict:
        self.victim.write_text("the victim's own bytes\n")
        daemon = DaemonProcess(
            self.runtime_dir,
            self.segment_dir,
            free_port(),
            "--exited-max",
            str(self.exited_max),
            "--record-max-mb",
            str(self.RECORD_MAX_MB),
            "--record-total-mb",
            str(self.RECORD_TOTAL_MB),
        )
        started = time.monotonic()
        threads = [
            threading.Thread(target=self.producers, name="producers"),
            threading.Thread(target=self.junk, name="junk"),
            threading.Thread(target=self.fuzz, args=(daemon.address,), name="fuzz"),
            threading.Thread(target=self.scrapes, args=(daemon.metrics_port,), name="scrapes"),
            threading.Thread(target=self.streams, args=(daemon.stub,), name="streams"),
            threading.Thread(target=self.recordings, args=(daemon.stub,), name="recordings"),
            threading.Thread(target=self.watch, args=(daemon,), name="watch"),
        ]
        try:
            for thread in threads:
                thread.start()
            self.stop.wait(self.seconds)
            self.stop.set()
            for thread in threads:
                thread.join(timeout=60)
            # every producer gone and drained: the retained ones' counts are final
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(p.alive for p in daemon.status().processes):
                time.sleep(0.1)
            time.sleep(0.5)  # and the last junk file seen by a discovery pass
            status = daemon.status()
            figures = dict(self.figures)
            figures["seconds"] = round(time.monotonic() - started, 1)
            figures["daemon_alive"] = daemon.process.poll() is None
            figures["retained"] = len(status.processes)
            figures["segments_left"] = sum(1 for p in self.segment_dir.iterdir() if p.stat().st_size > 64 << 10)
            figures["rejected_total"] = status.rejected_segments_total  # the junk there now
            # the least over 5 s: a leak stays, while the gRPC connections the fuzzers and scrapers just
            # closed are let go as the server notices (under a loaded CI machine, a moment later)
            ends = [descriptors(daemon.process.pid)]
            settle_by = time.monotonic() + 5
            while ends[-1] >= 32 and time.monotonic() < settle_by:
                time.sleep(0.25)
                ends.append(descriptors(daemon.process.pid))
            figures["descriptors_end"] = min(ends)
            unbalanced = []
            for process in status.processes:
                for stage in process.stages:
                    if stage.produced + stage.unpublished != (
                        stage.delivered + stage.dropped + stage.torn + stage.corrupt + stage.in_flight
                    ):
                        unbalanced.append(f"{process.pid} {stage.stage}")
                if process.accounting_errors:
                    unbalanced.append(f"{process.pid}: {process.accounting_errors} accounting errors")
            figures["unbalanced_retained"] = unbalanced
            gone = [
                json.loads(line)
                for line in daemon.log().splitlines()
                if line.startswith("{") and '"process_gone"' in line
            ]
            figures["processes_gone"] = len(gone)
            figures["accounting_errors"] = sum(int(entry.get("accounting_errors", 0)) for entry in gone)
            figures["crashes_in_log"] = [line for line in daemon.log().splitlines() if "Traceback" in line][:5]
            figures["victim_untouched"] = self.victim.read_text() == "the victim's own bytes\n"
            figures["spool_left"] = len(list((self.runtime_dir / "spool").iterdir()))
            return figures
        finally:
            self.stop.set()
            daemon.stop()
