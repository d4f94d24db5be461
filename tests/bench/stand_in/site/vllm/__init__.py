"""Stand-in for vLLM's offline API (LLM, SamplingParams) for bench/vllm_decode.py on a CPU: greedy
'tokens' that depend on the prompt only, a decode step of a fixed time per token."""

from __future__ import annotations

import dataclasses
import hashlib
import time

STEP_S = 0.0002


@dataclasses.dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 16
    ignore_eos: bool = False


@dataclasses.dataclass
class _Completion:
    token_ids: list[int]


@dataclasses.dataclass
class _Output:
    outputs: list[_Completion]


class LLM:
    def __init__(self, model: str, **engine_args) -> None:
        self.model = model
        self.engine_args = engine_args
        time.sleep(0.2)  # "engine start"

    def generate(self, prompts: list[str], params: SamplingParams, use_tqdm: bool = True) -> list[_Output]:
        time.sleep(STEP_S * params.max_tokens)  # one decode step per token, the batch together
        out = []
        for prompt in prompts:
            seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "little")
            out.append(_Output([_Completion([(seed + 7919 * i) % 8192 for i in range(params.max_tokens)])]))
        return out
