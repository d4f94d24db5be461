"""One process of bench/vllm_decode.py: offline vLLM (engine in this process), a model loaded
once, then single-stream and batched greedy generation measured REPEATS times in each of MODES
(gpuobs modes switched live through gpuobsctl, or "none"), interleaved. Writes its figures as
JSON to --result (atomically, at the end); --status gets a line per phase so the parent can
follow it without reading our stdout (vLLM's children may keep that open).

It imports vLLM first and waits for --go before it starts the engine, then for --measure before
it measures: the parent lets the next process import while this one starts its engine (both
CPU work, no measurement), and lets this one measure once the next has imported and waits."""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gpuobs_testing.phase_file import PhaseLog, phases, write_json_atomically

STARTED = time.perf_counter()
# the batch sizes vLLM captures a CUDA graph for (those up to the batch), offline and served alike
CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)


def our_pids(address: str) -> list[int]:
    """The observed processes that are this one or its descendants (vLLM may fork helpers)."""
    done = subprocess.run(
        [sys.executable, "-m", "gpuobs.client.main", "--address", address, "--output", "json", "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        return []
    mine = []
    for process in json.loads(done.stdout)["processes"]:
        pid = int(process["pid"])
        if not process["alive"]:
            continue
        ancestor = pid
        while ancestor > 1:
            if ancestor == os.getpid():
                mine.append(pid)
                break
            try:
                ancestor = int(Path(f"/proc/{ancestor}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                break
    return mine


SHIFT_FLAG = " --shift "


def mode_switch(token: str) -> tuple[str, int | None]:
    """(mode, sample shift or None) of a mode as the bench names it: a gpuobs mode, or `sampled
    --shift N` as gpuobsctl set-mode takes it, so that the summary's row says which shift it
    measured (the shift stays in force after it; no other mode reads it). ValueError otherwise."""
    mode, flag, shift = token.partition(SHIFT_FLAG)
    if flag and (mode != "sampled" or not shift.isdigit()):
        raise ValueError(f"{token!r}: only `sampled{SHIFT_FLAG}N` names a shift")
    return mode, int(shift) if flag else None


def known_mode(token: str) -> bool:
    """A mode a gpuobs process can be switched to: one of gpuobs's, or `sampled --shift N`."""
    from gpuobs.segment import MODES

    try:
        mode, _ = mode_switch(token)
    except ValueError:
        return False
    return mode in MODES


def set_mode(address: str, mode: str, pids: list[int]) -> float:
    """A live switch through the daemon's SetMode, as gpuobsctl set-mode makes it, from this process
    (a gpuobsctl process per switch spent ~0.7 s starting Python, 20 times per gpuobs process)."""
    from gpuobs.api.v1 import observer_pb2 as pb
    from gpuobs.client.connection import call

    name, shift = mode_switch(mode)
    request = pb.SetModeRequest(mode=name, pids=pids, timeout_ms=2000)
    if shift is not None:
        request.shift = shift
    began = time.perf_counter()
    response = call(address, "SetMode", request, timeout=10)
    if not response.results or not all(r.acknowledged and r.status == "ok" for r in response.results):
        raise SystemExit(f"set-mode {mode}: {response}")
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--status", type=Path, required=True)
    parser.add_argument("--go", type=Path, required=True)
    parser.add_argument("--measure", type=Path, required=True)
    parser.add_argument("--modes", default="none")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--single-tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=128)
    parser.add_argument("--address", default="")
    parser.add_argument("--capture-sizes", default=",".join(map(str, CAPTURE_SIZES)))
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.25)
    args = parser.parse_args()
    log = PhaseLog(args.status, STARTED)

    from vllm import LLM, SamplingParams

    log.say("imported")
    while not args.go.exists():
        time.sleep(0.05)
    log.say("go")
    sizes = [int(size) for size in args.capture_sizes.split(",") if int(size) <= args.batch]  # graphs vLLM can use
    began = time.perf_counter()
    llm = LLM(
        model=args.model,
        max_model_len=512,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.batch,
        seed=0,
        compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": sizes},
    )
    engine_ready_s = time.perf_counter() - began
    log.say(f"engine ready in {engine_ready_s:.1f} s")
    single = SamplingParams(temperature=0, max_tokens=args.single_tokens, ignore_eos=True)
    batched = SamplingParams(temperature=0, max_tokens=args.batch_tokens, ignore_eos=True)
    warm = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    prompt = "The quick brown fox jumps over the lazy dog, and then"
    prompts = [f"Request {index}: count the birds in the garden, one by one:" for index in range(args.batch)]
    llm.generate([prompt], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)  # warm-up
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    log.say("warm")
    while not args.measure.exists():
        time.sleep(0.05)
    modes = args.modes.split(",")
    pids = our_pids(args.address) if args.address else []
    if args.address and not pids:
        raise SystemExit("no observed process of ours is known to gpuobsd")
    result: dict = {
        "pid": os.getpid(),
        "observed_pids": pids,
        "engine_ready_s": engine_ready_s,
        "import_s": None,
        "modes": {
            mode: {
                "single_ms_per_token": [],
                "batch_tokens_per_s": [],
                "single_cpu_ms_per_token": [],
                "batch_cpu_ms_per_token": [],
                "set_mode_s": [],
            }
            for mode in modes
        },
        "tokens": {},
    }
    for seconds, phase in phases(args.status):
        if phase == "imported":
            result["import_s"] = seconds
    # The garbage collector neither pauses inside a timed window nor walks the engine's objects:
    # what survived start-up is frozen, and collection waits until a window is over (the same in
    # every configuration; a pause of tens of ms inside a 0.4 s window is several percent). A
    # full collection before every window made each process ~25 s longer.
    gc.collect()
    gc.freeze()
    for repeat in range(args.repeats):
        # each repeat starts one mode later: no mode always runs right after the same one (a
        # switch out of blocks, say) or always first, whatever that costs the next window
        shift = repeat % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            row = result["modes"][mode]
            if mode != "none":
                row["set_mode_s"].append(set_mode(args.address, mode, pids))
            # untimed: the GPU back at its clocks after the pause of the switch, the first
            # replays after a mode switch (the device reads the new word) out of the window
            llm.generate([prompt], warm, use_tqdm=False)
            # Wall time per token, and the CPU time of the whole process per token (every thread:
            # the engine's and the injector's, callbacks included), which a neighbour that takes
            # the cores away for a while does not lengthen.
            gc.disable()
            began, cpu = time.perf_counter(), time.process_time()
            out = llm.generate([prompt], single, use_tqdm=False)
            row["single_ms_per_token"].append((time.perf_counter() - began) * 1000 / args.single_tokens)
            row["single_cpu_ms_per_token"].append((time.process_time() - cpu) * 1000 / args.single_tokens)
            began, cpu = time.perf_counter(), time.process_time()
            outs = llm.generate(prompts, batched, use_tqdm=False)
            seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu
            gc.enable()
            produced = sum(len(o.outputs[0].token_ids) for o in outs)
            row["batch_tokens_per_s"].append(produced / seconds)
            row["batch_cpu_ms_per_token"].append(cpu_seconds * 1000 / max(produced, 1))
            if repeat == 0:
                digest = hashlib.sha256(
                    json.dumps(
                        [list(out[0].outputs[0].token_ids)] + [list(o.outputs[0].token_ids) for o in outs]
                    ).encode()
                ).hexdigest()
                result["tokens"][mode] = {
                    "sha256": digest,
                    "single_first": list(out[0].outputs[0].token_ids[:16]),
                    "batch_tokens": produced,
                }
        log.say(f"repeat {repeat + 1} done")
    # The process ends with os._exit (no exit hook, so no last snapshot from the injector): wait
    # for the GPU to finish what vLLM queued and for the tool thread's next snapshot, so that the
    # counters the bench reads afterwards hold no launch whose blocks were still running.
    torch = sys.modules.get("torch")  # vLLM's (the tests' stand-in for vLLM has none)
    if torch is not None:
        torch.cuda.synchronize()
    time.sleep(0.5)
    write_json_atomically(args.result, result)
    log.say("done")
    sys.stdout.flush()
    os._exit(0)  # vLLM's engine teardown can hang on exit; everything is written


if __name__ == "__main__":
    sys.exit(main())
