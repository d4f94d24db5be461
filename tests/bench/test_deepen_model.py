"""The deep model of the vLLM decode bench, made from one layer: every layer gets layer 0's
tensors (equal, not shared), the other tensors are left alone, the config says the depth; a
checkpoint that is not one layer deep is refused untouched. Needs torch and safetensors (skipped
without them, as in CI: the GPU machine's payload has both)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from gpuobs_testing.deepen_model import deepen  # noqa: E402


def one_layer(directory: Path, layers: int = 1) -> dict:
    torch.manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(16, 8), "model.norm.weight": torch.randn(8)}
    for layer in range(layers):
        tensors[f"model.layers.{layer}.mlp.down_proj.weight"] = torch.randn(8, 12)
        tensors[f"model.layers.{layer}.input_layernorm.weight"] = torch.randn(8)
    safetensors_torch.save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({"num_hidden_layers": layers, "hidden_size": 8}))
    return tensors


def test_every_layer_takes_layer_zeros_tensors(tmp_path: Path) -> None:
    made = one_layer(tmp_path)
    deepen(tmp_path, 5)
    deep = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    assert len(deep) == 2 + 5 * 2
    for layer in range(5):
        for part in ("mlp.down_proj.weight", "input_layernorm.weight"):
            assert torch.equal(deep[f"model.layers.{layer}.{part}"], made[f"model.layers.0.{part}"])
    assert torch.equal(deep["model.embed_tokens.weight"], made["model.embed_tokens.weight"])
    config = json.loads((tmp_path / "config.json").read_text())
    assert config == {"num_hidden_layers": 5, "hidden_size": 8}
    assert not list(tmp_path.glob("*.partial"))


def test_a_checkpoint_of_more_than_one_layer_is_refused_untouched(tmp_path: Path) -> None:
    one_layer(tmp_path, layers=2)
    before = (tmp_path / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match="one-layer"):
        deepen(tmp_path, 5)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"] == 2
