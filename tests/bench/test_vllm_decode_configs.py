"""The decode benches' configurations, checked without a GPU, since a mistake in them shows only
after minutes of device time: the floor tool's callback lists name only what the floor tool
accepts and take `off`'s floor apart step by step (each enabling what the one before did and
more, ending at what gpuobs keeps enabled); bench/overhead.py's floor rows are the vLLM bench's
configurations of the same names; the 8B-class model size has the geometry it claims and every
table of the bench knows it; `sampled --shift 10` is a mode the bench can switch to and name."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from gpuobs_testing import vllm_payload
from gpuobs_testing.deepen_model import PAD_TOKEN, pad_tokenizer, tensor_shape

ROOT = Path(__file__).resolve().parents[2]
FLOOR_TOOL = (ROOT / "bench" / "floor_tool" / "floor_tool.cpp").read_text()
STEADY = (ROOT / "injector" / "src" / "steady_callbacks.h").read_text()
# the floor tool's domain names and the Sanitizer domains they enable (its domain_of)
DOMAINS = dict(re.findall(r'name == "(\w+)"\) \*out = SANITIZER_CB_DOMAIN_(\w+);', FLOOR_TOOL))
# the ids gpuobs keeps enabled in steady state, as (domain, callback id)
STEADY_IDS = set(re.findall(r"\{SANITIZER_CB_DOMAIN_(\w+), (SANITIZER_CBID_\w+)\}", STEADY))
# make_tiny_qwen3.py's flags (the vLLM payload's model maker; GEOMETRY sets the rest)
MAKER_FLAGS = {"--layers", "--hidden", "--vocab"}
DECOMPOSITION = ("floor-subscribe", "floor-resource", "floor-launch", "floor-steady")


Benches = tuple[ModuleType, ModuleType]


@pytest.fixture(scope="module")
def benches() -> Benches:
    """bench/vllm_decode.py and bench/overhead.py, imported as the scripts import their neighbours."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module("vllm_decode"), importlib.import_module("overhead")
    finally:
        sys.path.remove(str(ROOT / "bench"))


@pytest.fixture(scope="module")
def models(benches: Benches) -> ModuleType:
    """bench/vllm_models.py, the model sizes of both vLLM benches (imported with them)."""
    return importlib.import_module("vllm_models")


def enabled(callbacks: str) -> set[tuple[str, str]]:
    """The steady ids a GPUOBS_FLOOR_CALLBACKS list enables; fails on a token the floor tool
    would reject (it only says so on the device's stderr) or that enables no steady id."""
    ids: set[tuple[str, str]] = set()
    for token in filter(None, callbacks.split(",")):
        if token == "steady":
            ids |= STEADY_IDS
        elif token.startswith("steady-"):
            domain = DOMAINS.get(token.removeprefix("steady-"))
            assert domain, f"{token}: not a domain of the floor tool {sorted(DOMAINS)}"
            mine = {entry for entry in STEADY_IDS if entry[0] == domain}
            assert mine, f"{token}: no steady callback in that domain"
            ids |= mine
        else:
            domain, _, cbid = token.partition(":")
            assert domain in DOMAINS and (not cbid or cbid.isdigit()), f"{token}: the floor tool would reject it"
    return ids


def test_the_floor_tool_and_the_steady_list_are_parsed() -> None:
    assert set(DOMAINS) == {"resource", "launch", "graphs", "synchronize"}, DOMAINS
    assert '"steady-"' in FLOOR_TOOL  # steady-DOMAIN is a token of the floor tool
    assert {domain for domain, _ in STEADY_IDS} == {"RESOURCE", "GRAPHS"}, STEADY_IDS
    assert ("GRAPHS", "SANITIZER_CBID_GRAPHS_LAUNCH_BEGIN") in STEADY_IDS  # the one that fires per replay


def test_every_floor_configuration_names_only_what_the_floor_tool_accepts(benches: Benches) -> None:
    vllm_decode, overhead = benches
    lists = [
        env["GPUOBS_FLOOR_CALLBACKS"] for library, env, _ in vllm_decode.CONFIGS.values() if "floor" in str(library)
    ]
    rows = [row for rows in (overhead.DECODE, overhead.FLOOR, overhead.DECOMPOSE, overhead.INLINE) for row in rows]
    lists += [row[4]["GPUOBS_FLOOR_CALLBACKS"] for row in rows if "GPUOBS_FLOOR_CALLBACKS" in row[4]]
    assert len(lists) >= 12
    for callbacks in lists:
        enabled(callbacks)


def test_the_decomposition_adds_one_part_at_a_time_and_ends_at_the_steady_state(benches: Benches) -> None:
    vllm_decode, _ = benches
    steps = [vllm_decode.CONFIGS[name] for name in DECOMPOSITION]
    assert {library for library, _, _ in steps} == {"libgpuobs_floor_tool.so"}
    assert all(modes == "none" for _, _, modes in steps)
    ids = [enabled(env["GPUOBS_FLOOR_CALLBACKS"]) for _, env, _ in steps]
    patched = [env["GPUOBS_FLOOR_PATCH"] == "1" for _, env, _ in steps]
    assert ids[0] == set() and not patched[0]  # subscribed only
    assert ids[1] and {domain for domain, _ in ids[1]} == {"RESOURCE"} and not patched[1]
    assert ids[1] < ids[2] == STEADY_IDS and not patched[2]  # + the graph callbacks, one per replay
    assert ids[3] == STEADY_IDS and patched[3]  # + the empty patch: the floor under `off`


def test_the_decode_graph_floor_rows_are_the_vllm_benchs_configurations(benches: Benches) -> None:
    vllm_decode, overhead = benches
    rows = {row[0].split(":")[0]: row for row in overhead.FLOOR if row[0].startswith("floor-")}
    assert list(rows) == list(DECOMPOSITION)
    for name, (_, mode, patch_set, _, env) in rows.items():
        assert mode == "off" and patch_set is None and env["CUDA_INJECTION64_PATH"] == str(overhead.FLOOR_TOOL)
        assert {k: v for k, v in env.items() if k != "CUDA_INJECTION64_PATH"} == vllm_decode.CONFIGS[name][1], name
    labels = [row[0] for row in overhead.FLOOR]
    assert len(set(labels)) == len(labels) and labels[0] == overhead.BASELINE[0]
    assert "floor" in overhead.WORKLOADS and "off" in labels


def test_the_8b_model_size_has_the_geometry_it_claims(benches: Benches, models: ModuleType) -> None:
    vllm_decode, _ = benches
    for size, flags in models.MODELS.items():
        assert set(flags[::2]) <= MAKER_FLAGS and all(value.isdigit() for value in flags[1::2]), size
        assert size in vllm_decode.WORKLOAD and 0 < models.GPU_MEMORY[size] < 1, size
    assert set(models.GEOMETRY) <= models.BY_COPIES <= set(models.MODELS)
    flags = dict(zip(models.MODELS["8b"][::2], models.MODELS["8b"][1::2]))
    config = {
        "hidden_size": int(flags["--hidden"]),
        "vocab_size": int(flags["--vocab"]),
        "num_hidden_layers": 1,
        **models.GEOMETRY["8b"],
    }
    assert (int(flags["--layers"]), config["hidden_size"], config["vocab_size"]) == (32, 4096, 128256)
    assert config["num_attention_heads"] * config["head_dim"] == config["hidden_size"]
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (32, 8)
    layer = [
        f"model.layers.0.{part}.weight"
        for part in (
            "input_layernorm",
            "post_attention_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "self_attn.q_norm",
            "self_attn.k_norm",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
    ]

    def count(name: str) -> int:
        total = 1
        for extent in tensor_shape(name, config):
            total *= extent
        return total

    parameters = count("model.embed_tokens.weight") + count("model.norm.weight") + 32 * sum(map(count, layer))
    assert 7.4e9 < parameters < 7.6e9, parameters  # Llama 3 8B's less its untied output matrix
    assert tensor_shape("model.layers.0.self_attn.k_proj.weight", config) == (1024, 4096)
    assert tensor_shape("model.layers.3.mlp.down_proj.weight", config) == (4096, 14336)
    with pytest.raises(SystemExit, match="not a Qwen3 tensor"):
        tensor_shape("model.layers.0.self_attn.q_proj.bias", config)


def test_sampled_with_a_shift_is_a_mode_the_bench_switches_to_and_names(benches: Benches) -> None:
    vllm_decode, _ = benches
    mode_switch = sys.modules[vllm_decode.known_mode.__module__].mode_switch  # the worker's (vllm_generate.py)
    assert mode_switch("sampled --shift 10") == ("sampled", 10)
    assert mode_switch("counter") == ("counter", None)
    for wrong in ("counter --shift 10", "sampled --shift ten"):
        with pytest.raises(ValueError):
            mode_switch(wrong)
    assert all(vllm_decode.known_mode(mode) for mode in vllm_decode.GPUOBS_MODES.split(","))
    assert vllm_decode.known_mode("sampled --shift 10") and not vllm_decode.known_mode("sampling")
    # the summary's rows are named by the modes the process measured
    modes = {"none": "none", "gpuobs": "off,sampled --shift 10"}
    runs = [
        {
            "config": config,
            "round": 0,
            "figures": {
                "engine_ready_s": 1.0,
                "tokens": {},
                "modes": {
                    mode: {"single_ms_per_token": [2.0], "batch_tokens_per_s": [100.0]} for mode in wanted.split(",")
                },
            },
        }
        for config, wanted in modes.items()
    ]
    rows = vllm_decode.summarise(runs, ["none", "gpuobs"], modes)["rows"]
    assert set(rows) == {"none", "gpuobs:off", "gpuobs:sampled --shift 10"}
    assert rows["gpuobs:sampled --shift 10"]["single_ms_per_token"]["ratio"] == 1.0


def test_the_tokenizer_gets_a_token_for_every_id_of_the_vocabulary(tmp_path: Path) -> None:
    vocab = {"<|endoftext|>": 0, "a": 1, "b": 2, "ab": 4}
    added = [{"id": 0, "content": "<|endoftext|>"}, {"id": 5, "content": "<|im_end|>"}]
    data: dict[str, object] = {"added_tokens": added, "model": {"type": "BPE", "vocab": vocab, "merges": [["a", "b"]]}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    assert pad_tokenizer(tmp_path, 8) == 3  # ids 3, 6 and 7
    padded = json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"]
    assert sorted(padded.values()) == [0, 1, 2, 3, 4, 6, 7]  # 5 is an added token's
    assert padded[PAD_TOKEN.format(3)] == 3 and padded[PAD_TOKEN.format(7)] == 7
    assert pad_tokenizer(tmp_path, 8) == 0
    clash = dict(data, model={"type": "BPE", "vocab": {**vocab, PAD_TOKEN.format(3): 9}, "merges": []})
    (tmp_path / "tokenizer.json").write_text(json.dumps(clash))
    with pytest.raises(SystemExit, match="trained token"):
        pad_tokenizer(tmp_path, 8)


def test_a_geometry_is_set_on_one_layer_before_it_is_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make_model: the maker makes one layer, deepen_model then gets the depth and the fields; a
    one-layer model with a geometry is reshaped too; without either, one call as before."""
    calls: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess:
        calls.append([str(a) for a in argv])
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(vllm_payload.subprocess, "run", run)
    geometry = {"num_key_value_heads": 8, "vocab_size": 128256}
    shape = ["--layers", "32", "--hidden", "4096", "--vocab", "8192"]
    assert vllm_payload.make_model(tmp_path, tmp_path / "a", {}, shape, geometry=geometry)
    assert calls[0][2:] == [str(tmp_path / "a"), "--layers", "1", "--hidden", "4096", "--vocab", "8192"]
    assert calls[1][1:] == ["-m", "gpuobs_testing.deepen_model", str(tmp_path / "a"), "32"] + [
        "num_key_value_heads=8",
        "vocab_size=128256",
    ]
    calls.clear()
    vllm_payload.make_model(tmp_path, tmp_path / "b", {}, ["--layers", "1"], geometry=geometry)
    assert calls[1][4:] == ["1", "num_key_value_heads=8", "vocab_size=128256"]
    calls.clear()
    vllm_payload.make_model(tmp_path, tmp_path / "c", {}, shape)
    assert len(calls) == 1 and calls[0][3:5] == ["--layers", "32"]
