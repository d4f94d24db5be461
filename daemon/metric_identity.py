"""Who a process's series belong to: the labels that key every per-process and per-kernel series
instead of its pid, so that a restart of the same rank on the same GPU continues its series
(a pid minted a new set at every restart: 2,911 series after 30 minutes of 16 short-lived
processes). The labels that name a GPU or a host are spelled as dcgm-exporter spells them
(`Hostname`, `UUID`, `gpu`; `device` and `pci_bus_id` on the info series), so that a query joins
the two on `UUID` without relabelling. (Not dcgm-exporter's `modelName`: promtool's lint refuses a
camelCase label, and a join takes it from DCGM's series with `group_left (modelName)`.) The pid
is only on `gpuobs_process_info`.

Sources, all readable by gpuobsd without the process's help:
- the host: `NODE_NAME` (Kubernetes' downward API, as dcgm-exporter reads it), else the host name;
- the GPU: the segment header's UUID and PCI bus id (the injector's, per context); `gpu` and
  `device` from the driver's /proc/driver/nvidia/gpus, by the position of the bus id among the
  host's GPUs (NVML's and so DCGM's order; empty where the driver's folder is not visible);
- rank and model: what the framework plugin set (empty until it does);
- Kubernetes: the pod's UID from /proc/<pid>/cgroup (readable by anyone), and the pod's name,
  namespace and container from the downward-API variables GPUOBS_POD_NAME, GPUOBS_POD_NAMESPACE
  and GPUOBS_CONTAINER_NAME in /proc/<pid>/environ (readable by the process's user or with
  CAP_SYS_PTRACE; without it the three labels stay empty and `pod_uid` on the info series joins
  kube-state-metrics' `kube_pod_info{uid}`)."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from . import results
from .identity import pci_address

DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
PROC = Path("/proc")
# Every per-process series carries these, in this order (Prometheus sorts them anyway).
IDENTITY_LABELS: tuple[str, ...] = ("Hostname", "UUID", "gpu", "model", "rank", "namespace", "pod", "container")
POD_VARIABLES = {"GPUOBS_POD_NAMESPACE": "namespace", "GPUOBS_POD_NAME": "pod", "GPUOBS_CONTAINER_NAME": "container"}
MAX_LABEL_VALUE = 253  # a Kubernetes name's bound; anything longer is cut, never refused
MAX_PROC_BYTES = 1 << 20  # what is read of a process's environ or cgroup file
# the pod's UID as the kubelet names its cgroup: cgroupfs /kubepods/burstable/pod<uid>/<container>,
# systemd kubepods-burstable-pod<uid with _>.slice/cri-containerd-<container>.scope
POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


@dataclasses.dataclass(frozen=True)
class SeriesIdentity:
    """The labels of IDENTITY_LABELS, in that order."""

    hostname: str
    uuid: str = ""
    gpu: str = ""
    model: str = ""
    rank: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""

    def values(self) -> list[str]:
        return [getattr(self, field.name) for field in dataclasses.fields(self)]


@dataclasses.dataclass(frozen=True)
class DriverGpu:
    """A GPU as the driver lists it: DCGM's `gpu` (its index) and `device`."""

    index: int

    @property
    def device(self) -> str:
        return f"nvidia{self.index}"


@dataclasses.dataclass(frozen=True)
class Pod:
    """The Kubernetes pod of a process (all empty outside one)."""

    uid: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""


def host_name(environ: Mapping[str, str] | None = None) -> str:
    """NODE_NAME where set (a DaemonSet's pod is named after itself, not its node), else the host name."""
    env = os.environ if environ is None else environ
    return env.get("NODE_NAME", "").strip()[:MAX_LABEL_VALUE] or socket.gethostname()


def driver_gpus(directory: Path = DRIVER_GPUS) -> dict[tuple[int, int, int, int], DriverGpu]:
    """The host's GPUs by PCI address, numbered in PCI bus order (NVML's default order, which
    DCGM's GPU ids follow). Empty where the folder is absent or unreadable."""
    try:
        entries = [(pci_address(entry.name), entry) for entry in directory.iterdir()]
    except OSError:
        return {}
    listed = sorted(address for address, _ in entries if address is not None)
    return {address: DriverGpu(index) for index, address in enumerate(listed)}


def pod_uid(cgroup: str) -> str:
    """The pod UID named in a /proc/<pid>/cgroup text ("" outside a pod)."""
    found = POD_UID.search(cgroup)
    return found.group(1).replace("_", "-") if found else ""


def _read(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(MAX_PROC_BYTES)


def pod_of(pid: int, proc: Path = PROC) -> Pod:
    """The pod of a live process: its UID from its cgroup, its names from its downward-API
    variables (POD_VARIABLES) when its environment is readable. The caller checks the process
    is still the same one afterwards (a pid may be reused)."""
    try:
        uid = pod_uid(_read(proc / str(pid) / "cgroup").decode(errors="replace"))
    except OSError:
        return Pod()
    if not uid:
        return Pod()
    names: dict[str, str] = {}
    try:
        for entry in _read(proc / str(pid) / "environ").split(b"\0"):
            key, _, value = entry.decode(errors="replace").partition("=")
            if key in POD_VARIABLES:
                names[POD_VARIABLES[key]] = value.strip()[:MAX_LABEL_VALUE]
    except OSError:
        pass  # not the process's user and no CAP_SYS_PTRACE: the UID alone
    return Pod(uid=uid, **names)


def primary_gpu(view: results.Process) -> results.Gpu | None:
    """The GPU a process's series are keyed by: its first context's (a serving rank has one)."""
    return view.gpus[0] if view.gpus else None


def series_identity(
    view: results.Process, host: str, gpus: Mapping[tuple[int, int, int, int], DriverGpu], pod: Pod
) -> SeriesIdentity:
    """The labels a process's series carry: the same for a restart of the same rank of the same
    model on the same GPU (in the same pod), whatever its pid."""
    gpu = primary_gpu(view)
    address = pci_address(gpu.pci_bus_id) if gpu is not None else None
    listed = gpus.get(address) if address is not None else None
    return SeriesIdentity(
        hostname=host,
        uuid=gpu.uuid if gpu is not None else "",
        gpu=str(listed.index) if listed is not None else "",
        model=view.model if view.identity_set else "",
        rank=str(view.rank) if view.identity_set else "",
        namespace=pod.namespace,
        pod=pod.pod,
        container=pod.container,
    )
