"""Offline vLLM (tests/gpu/test_vllm_ops.py): with enforce_eager (no CUDA graph, no torch.compile)
every kernel is an eager launch that names the op it ran under, which the vLLM plugin records for
the first GPUOBS_OPS_STEPS engine steps; with --graphs, torch.compile and CUDA graphs of batch
sizes 1 to 8 (FULL_AND_PIECEWISE), whose capture the plugin labels with GPUOBS_OPS_CAPTURE=1. It
generates once, then keeps generating until --stop exists, so a daemon can switch it beside other
observed processes. --status gets a line per phase, --result the tokens (JSON, written atomically): the
parent never reads our stdout, which vLLM's children may keep open."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from gpuobs_testing.phase_file import PhaseLog, write_json_atomically

STARTED = time.perf_counter()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--status", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--stop", type=Path, required=True)
    parser.add_argument("--graphs", action="store_true", help="torch.compile and CUDA graphs instead of eager")
    args = parser.parse_args()
    log = PhaseLog(args.status, STARTED)

    from vllm import LLM, SamplingParams

    log.say("imported")
    execution = (
        {"compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8]}}
        if args.graphs
        else {"enforce_eager": True}
    )
    began = time.perf_counter()
    # a KV cache of a fixed size: vLLM's memory profiling reads the GPU's free memory, which an
    # engine starting beside this one changes (two at once left one a negative KV cache on the H200)
    llm = LLM(
        model=args.model,
        max_model_len=512,
        gpu_memory_utilization=0.2,
        kv_cache_memory_bytes=2 << 30,
        max_num_seqs=8,
        seed=0,
        **execution,
    )
    engine_ready_s = time.perf_counter() - began
    log.say("engine ready")
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    prompts = [f"Request {index}: count the birds in the garden, one by one:" for index in range(4)]
    outs = llm.generate(prompts, greedy, use_tqdm=False)  # the op window: its first steps
    result = {
        "pid": os.getpid(),
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        "loops": 0,
        "engine_ready_s": engine_ready_s,
    }
    write_json_atomically(args.result, result)
    log.say("generated")
    while not args.stop.exists():  # running while the daemon switches it
        llm.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)
        result["loops"] += 1
    import torch

    torch.cuda.synchronize()  # every queued kernel done before the injector's last snapshot
    time.sleep(0.5)
    write_json_atomically(args.result, result)
    log.say("done")
    sys.stdout.flush()
    os._exit(0)  # vLLM's engine teardown can hang on exit; everything is written


if __name__ == "__main__":
    sys.exit(main())
