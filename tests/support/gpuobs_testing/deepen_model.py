"""Deepens a random-weight Qwen3 checkpoint: `python -m gpuobs_testing.deepen_model DIR LAYERS`
gives every layer the tensors of layer 0 (copies) and says LAYERS in config.json. The payload's
model maker initialises every layer in fp32 on the CPU, minutes for 32 layers of hidden 5120; one
layer takes seconds, and a decode step's time does not depend on what the weights hold. Runs
where torch and safetensors are (the vLLM payload's environment)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

FIRST_LAYER = re.compile(r"^(model\.layers\.)0(\..+)$")


def deepen(directory: Path, layers: int) -> None:
    """In place: the weights file is replaced whole (renamed over), then the config."""
    from safetensors.torch import load_file, save_file

    weights = directory / "model.safetensors"
    tensors = load_file(str(weights))
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    if config.get("num_hidden_layers") != 1:
        raise SystemExit(f"{directory}: expected a one-layer checkpoint, found {config.get('num_hidden_layers')}")
    for name, tensor in list(tensors.items()):
        match = FIRST_LAYER.match(name)
        if match:
            for layer in range(1, layers):
                tensors[f"{match.group(1)}{layer}{match.group(2)}"] = tensor.clone()  # safetensors keeps no aliases
    partial = weights.with_name(weights.name + ".partial")
    save_file(tensors, str(partial), metadata={"format": "pt"})
    os.replace(partial, weights)
    config["num_hidden_layers"] = layers
    config_path.write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    deepen(Path(sys.argv[1]), int(sys.argv[2]))
