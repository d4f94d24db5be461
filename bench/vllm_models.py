"""The model sizes of the vLLM benches, one definition for the offline one (vllm_decode.py) and the
served one (vllm_overhead.py): what the payload's model maker makes for each size, what is set
on it afterwards, and the share of GPU memory its engine may take, so that a served figure and an
offline figure of one size are of the same model."""

from __future__ import annotations

import json
from pathlib import Path

from gpuobs_testing.vllm_payload import make_model

# The model, by what bounds its single-stream decode on the H200: the 24 x 2048 model reads
# 2.4 GB of weights per token (~0.6 ms of GPU) against ~2 ms of host work per step, so its wall
# time follows the host's speed, which varied 1.5x inside one process (no-tool CPU time per token
# tracked wall time within 3%); 32 x 5120 reads ~15 GB per token (~3.6 ms), so the GPU sets the
# pace and a device-side cost shows in wall time.
MODELS = {
    "host-bound": ["--layers", "24", "--hidden", "2048", "--vocab", "8192"],
    "gpu-bound": ["--layers", "32", "--hidden", "5120", "--vocab", "8192"],
    # the 8B class (Llama 3 8B's geometry): make_tiny_qwen3.py makes one layer of hidden 4096, and
    # GEOMETRY sets what it cannot
    "8b": ["--layers", "32", "--hidden", "4096", "--vocab", "8192"],
}
# Config fields beyond make_tiny_qwen3.py's flags (it gives hidden/64 heads of 64, half as many KV
# heads, an MLP twice the hidden size, tied embeddings): set on the one-layer model, every tensor
# made afresh in its new shape and the tokenizer given a token for every id, before the layers
# are copied (gpuobs_testing.deepen_model). 32 query heads of 128 over 8 KV heads, MLP 14336,
# vocabulary 128256: ~7.5 B parameters, 15.0 GB of bf16 read per token (the embeddings stay tied,
# which changes no step's time: the logits read the same 128256 x 4096 matrix either way).
GEOMETRY: dict[str, dict[str, int]] = {
    "8b": {
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": 128256,
    },
}
# Made with one layer, then every layer a copy of it: seconds rather than minutes for 32 layers.
BY_COPIES = {"gpu-bound", "8b"}
# What a process generates per repeat (vllm_decode.py) and a served load asks for
# (vllm_overhead.py): (single-stream tokens, batch, tokens per request). The GPU-bound model's
# steps are ~6x longer, so it generates less to keep 9 processes in one call.
# The 8B class reads as many bytes per token as the GPU-bound model (15.0 GB against 15.1 GB), so
# its steps take as long (~3.6 ms on the H200 by bandwidth, ~5 ms on the H100) and it generates the
# same: per repeat and mode 32 + 128 single-stream steps and 64 batched ones, ~1.2 s on the H200
# and ~1.7 s on the H100, so a no-tool process measures in ~9 s and a gpuobs process of four modes
# in ~35 s. The rest is start-up (an import overlapped with the process before, ~25 s of engine
# start with 15 GB of weights and the compile cache warm, ~40 s more for the first process that
# compiles): ~40 s a no-tool or floor process, ~65 s a gpuobs one, so 9 processes of three
# configurations (three rounds) take ~430 s, and 12 of five floor-only configurations ~480 s,
# beside ~60 s to make the model where the run makes it.
WORKLOAD = {"host-bound": (256, 64, 128), "gpu-bound": (128, 32, 64), "8b": (128, 32, 64)}
# The share of GPU memory vLLM may take: 15 GB of weights leave too little of a quarter of an
# H100's 80 GB for the profile run's activations and a KV cache.
GPU_MEMORY = {"host-bound": 0.25, "gpu-bound": 0.25, "8b": 0.35}


def model_folder(size: str) -> str:
    """Where a bench makes the model of `size` unless told otherwise: one folder for both benches,
    so that a run finds the model the other bench's run made (the 8B class's 15 GB take ~60 s)."""
    return f"/tmp/qwen3-{size}"


def make(payload: Path, where: Path, env: dict[str, str], size: str) -> bool:
    """The model of `size` at `where`, unless one is there already (make_model); True when it was
    made now. Both benches make a size this way, so that a model one of them made is the one the
    other would have made."""
    return make_model(payload, where, env, MODELS[size], by_copies=size in BY_COPIES, geometry=GEOMETRY.get(size))


def describe(size: str) -> str:
    """The model of `size` as a report names it: the maker's flags, then what was set on them."""
    geometry = GEOMETRY.get(size)
    return (
        "random-weight Qwen3, make_tiny_qwen3.py "
        + " ".join(MODELS[size])
        + (f", then {json.dumps(geometry)}" if geometry else "")
    )
