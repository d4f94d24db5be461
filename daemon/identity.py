"""Who an observed process is, from its segment's header (the fields its framework plugin set,
the GPUs of its contexts), and a GPU named the way an operator names one."""

from __future__ import annotations

from gpuobs.segment import IDENTITY_SET, PROCESS_ROLES

from . import results

ROLE_NAMES = {value: name for name, value in PROCESS_ROLES.items()}


def identity_of(header: dict) -> dict:
    """Who a process is, from its segment's header: the fields its plugin set, the GPUs of its
    contexts (a header names the first two; gpu_count counts them all)."""
    named = min(header.get("gpu_count", 0), len(header.get("gpus", [])))
    return {
        "identity_set": bool(header.get("identity_flags", 0) & IDENTITY_SET),
        "role": ROLE_NAMES.get(header.get("role", 0), "unknown"),
        "rank": header.get("rank", 0),
        "world_size": header.get("world_size", 0),
        "local_rank": header.get("local_rank", 0),
        "model": header.get("model", ""),
        "gpus": [results.Gpu(g["ordinal"], g["context"], g["pci_bus_id"], g["uuid"]) for g in header["gpus"][:named]],
        "gpu_count": header.get("gpu_count", 0),
    }


def pci_address(text: str) -> tuple[int, int, int, int] | None:
    """domain:bus:device.function as numbers: CUDA writes 0000:3b:00.0, nvidia-smi 00000000:3B:00.0."""
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def matches_gpu(gpus: list[results.Gpu], wanted: str) -> bool:
    """A GPU named by its UUID or its PCI bus id, as nvidia-smi names it; not by an ordinal, which
    is each process's own (CUDA_VISIBLE_DEVICES renumbers them) and would select across GPUs."""
    address = pci_address(wanted)
    return any(
        wanted.lower() == g.uuid.lower() or (address is not None and address == pci_address(g.pci_bus_id)) for g in gpus
    )
