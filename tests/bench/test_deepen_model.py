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


def test_each_layer_gets_a_layer_type_where_the_config_lists_them(tmp_path: Path) -> None:
    """transformers refuses a config whose layer_types are not one per layer."""
    one_layer(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config | {"layer_types": ["full_attention"]}))
    deepen(tmp_path, 3)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["num_hidden_layers"] == 3 and config["layer_types"] == ["full_attention"] * 3
    assert not list(tmp_path.glob("*.partial"))


def test_a_checkpoint_of_more_than_one_layer_is_refused_untouched(tmp_path: Path) -> None:
    one_layer(tmp_path, layers=2)
    before = (tmp_path / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match="one-layer"):
        deepen(tmp_path, 5)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"] == 2


def test_a_reshape_makes_every_tensor_afresh_in_the_geometry_it_sets(tmp_path: Path) -> None:
    """A production model's geometry on the model maker's one layer: the config says it, every
    tensor has its shape (bf16, norms 1), the tokenizer covers the new vocabulary, and the layer is
    then copied as before; a deeper checkpoint is refused untouched."""
    from gpuobs_testing.deepen_model import PAD_TOKEN, reshape

    parts = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm"]
    parts += ["self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm"]
    tensors = {f"model.layers.0.{part}.weight": torch.zeros(2, 2) for part in parts}
    tensors |= {"model.embed_tokens.weight": torch.zeros(4, 2), "model.norm.weight": torch.zeros(2)}
    safetensors_torch.save_file(tensors, str(tmp_path / "model.safetensors"))
    config = {"num_hidden_layers": 1, "hidden_size": 16, "vocab_size": 4, "num_attention_heads": 4}
    config |= {"num_key_value_heads": 2, "head_dim": 4, "intermediate_size": 32}
    (tmp_path / "config.json").write_text(json.dumps(config))
    vocab = {"a": 0, "b": 1, "ab": 2, "<|im_end|>": 3}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": [], "model": {"vocab": vocab}}))
    fields = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 24}
    reshape(tmp_path, fields | {"vocab_size": 10})
    made = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    assert set(made) == set(tensors)
    shapes = {name.removeprefix("model.layers.0."): tuple(tensor.shape) for name, tensor in made.items()}
    assert shapes["self_attn.q_proj.weight"] == (16, 16) and shapes["self_attn.k_proj.weight"] == (8, 16)
    assert shapes["self_attn.o_proj.weight"] == (16, 16) and shapes["self_attn.q_norm.weight"] == (8,)
    assert shapes["mlp.up_proj.weight"] == (24, 16) and shapes["mlp.down_proj.weight"] == (16, 24)
    assert shapes["model.embed_tokens.weight"] == (10, 16) and shapes["model.norm.weight"] == (16,)
    assert all(tensor.dtype == torch.bfloat16 for tensor in made.values())
    assert torch.equal(made["model.norm.weight"], torch.ones(16, dtype=torch.bfloat16))
    assert 0 < made["model.layers.0.mlp.up_proj.weight"].float().std() < 0.05
    assert json.loads((tmp_path / "config.json").read_text()) == config | fields | {"vocab_size": 10}
    padded = json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"]
    assert sorted(padded.values()) == list(range(10)) and padded[PAD_TOKEN.format(9)] == 9
    deepen(tmp_path, 3)
    deep = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    assert tuple(deep["model.layers.2.mlp.up_proj.weight"].shape) == (24, 16)
    before = (tmp_path / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match="one-layer"):
        reshape(tmp_path, fields)
    assert (tmp_path / "model.safetensors").read_bytes() == before
