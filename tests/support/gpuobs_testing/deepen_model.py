"""Deepens a random-weight Qwen3 checkpoint: `python -m gpuobs_testing.deepen_model DIR LAYERS
[FIELD=VALUE ...]` gives every layer the tensors of layer 0 (copies) and says LAYERS in
config.json. The payload's model maker initialises every layer in fp32 on the CPU, minutes for 32
layers of hidden 5120; one layer takes seconds, and a decode step's time does not depend on what
the weights hold. FIELD=VALUE first sets config fields the model maker has no flag for (heads, KV
heads, head size, MLP width, vocabulary: a production model's geometry), every tensor made afresh
in the shape they give it (reshape). Runs where torch and safetensors are (the vLLM payload's
environment)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

FIRST_LAYER = re.compile(r"^(model\.layers\.)0(\..+)$")
# a reshaped model's tokenizer: the ids its training left without a token get one of these
PAD_TOKEN = "~pad{}"


def one_layer_config(directory: Path) -> tuple[Path, dict]:
    """(config.json's path, the config) of a one-layer checkpoint, what deepen and reshape start
    from; SystemExit for any other, which is left untouched."""
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    if config.get("num_hidden_layers") != 1:
        raise SystemExit(f"{directory}: expected a one-layer checkpoint, found {config.get('num_hidden_layers')}")
    return config_path, config


def replace_weights(weights: Path, tensors: dict) -> None:
    """The weights file replaced whole (renamed over): a run cut short leaves the old one."""
    from safetensors.torch import save_file

    partial = weights.with_name(weights.name + ".partial")
    save_file(tensors, str(partial), metadata={"format": "pt"})
    os.replace(partial, weights)


def deepen(directory: Path, layers: int) -> None:
    """In place: the weights file is replaced whole (renamed over), then the config."""
    from safetensors.torch import load_file

    weights = directory / "model.safetensors"
    tensors = load_file(str(weights))
    config_path, config = one_layer_config(directory)
    for name, tensor in list(tensors.items()):
        match = FIRST_LAYER.match(name)
        if match:
            for layer in range(1, layers):
                tensors[f"{match.group(1)}{layer}{match.group(2)}"] = tensor.clone()  # safetensors keeps no aliases
    replace_weights(weights, tensors)
    config["num_hidden_layers"] = layers
    if isinstance(config.get("layer_types"), list):  # one per layer, or transformers refuses the config
        config["layer_types"] = config["layer_types"][:1] * layers
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def tensor_shape(name: str, config: dict) -> tuple[int, ...]:
    """The shape a Qwen3 checkpoint's tensor has under `config` (by the end of its name: the same
    in every layer), so a reshape needs no model class. SystemExit for a tensor it does not know
    (a bias, another architecture): nothing is guessed."""
    hidden, vocab = int(config["hidden_size"]), int(config["vocab_size"])
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    mlp = int(config["intermediate_size"])
    shapes: dict[str, tuple[int, ...]] = {
        "embed_tokens.weight": (vocab, hidden),
        "lm_head.weight": (vocab, hidden),
        "self_attn.q_proj.weight": (heads * head_dim, hidden),
        "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
        "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
        "self_attn.o_proj.weight": (hidden, heads * head_dim),
        "self_attn.q_norm.weight": (head_dim,),
        "self_attn.k_norm.weight": (head_dim,),
        "mlp.gate_proj.weight": (mlp, hidden),
        "mlp.up_proj.weight": (mlp, hidden),
        "mlp.down_proj.weight": (hidden, mlp),
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
        "norm.weight": (hidden,),
    }
    for suffix, shape in shapes.items():
        if name == suffix or name.endswith("." + suffix):
            return shape
    raise SystemExit(f"{name}: not a Qwen3 tensor whose shape reshape knows")


def pad_tokenizer(directory: Path, size: int) -> int:
    """Gives every id below `size` that the trained tokenizer lacks a token (PAD_TOKEN, which no
    text encodes to: no merge makes it), so that whatever id a random model emits decodes as in a
    real model whose tokenizer covers its vocabulary. Returns how many were added."""
    path = directory / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab: dict[str, int] = data["model"]["vocab"]
    taken = set(vocab.values()) | {int(token["id"]) for token in data.get("added_tokens", [])}
    missing = [index for index in range(size) if index not in taken]
    for index in missing:
        token = PAD_TOKEN.format(index)
        if token in vocab:
            raise SystemExit(f"{path}: {token} is a trained token already")
        vocab[token] = index
    if missing:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(partial, path)
    return len(missing)


def reshape(directory: Path, fields: dict[str, int]) -> None:
    """In place, on a one-layer checkpoint before it is deepened: `fields` set in config.json and
    every tensor made afresh in the shape they give it, as the model maker initialises (normal,
    std 0.02; norms 1; bf16; seeded), on the GPU where there is one (1.5 GB of random numbers for
    an 8B-class layer and its embeddings); the tokenizer padded to the vocabulary."""
    import torch
    from safetensors import safe_open

    config_path, config = one_layer_config(directory)
    config.update(fields)
    weights = directory / "model.safetensors"
    with safe_open(str(weights), framework="pt") as checkpoint:
        names = list(checkpoint.keys())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator(device=device).manual_seed(0)
    tensors = {}
    for name in names:
        shape = tensor_shape(name, config)
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
        else:
            made = torch.empty(shape, dtype=torch.float32, device=device).normal_(0.0, 0.02, generator=generator)
            tensors[name] = made.to("cpu", torch.bfloat16)
    pad_tokenizer(directory, int(config["vocab_size"]))
    replace_weights(weights, tensors)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def config_fields(items: list[str]) -> dict[str, int]:
    """FIELD=VALUE arguments as config fields (every geometry field is an integer)."""
    fields = {}
    for item in items:
        field, equals, value = item.partition("=")
        if not equals or not value.isdigit():
            raise SystemExit(f"{item!r}: expected FIELD=INTEGER")
        fields[field] = int(value)
    return fields


if __name__ == "__main__":
    target, depth, geometry = Path(sys.argv[1]), int(sys.argv[2]), config_fields(sys.argv[3:])
    if geometry:
        reshape(target, geometry)
    deepen(target, depth)
