"""A decode-like step captured into one CUDA graph: --layers layers, each with three cuBLAS
matmuls and one dedicated cache-write kernel (a Triton kernel that writes the step's new K and
V rows into that layer's cache at the position held in a device tensor), replayed --replays
times after a warm-up. Deterministic (torch deterministic algorithms), so outputs can be
compared between runs with and without the injector.

--two-streams puts the V projection and its cache write on a second stream inside the capture
(one graph, two branches). --wait-before-replays prints {"captured": true} after the capture and
waits for a line on stdin, so a test can switch the mode between capture and replay.
--loop-seconds replays in a loop that long instead, checking every replay's output against the
first one (a test switches modes meanwhile).
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def kv_cache_write_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, position_ptr, width, BLOCK: tl.constexpr):
    """Writes one token's K and V rows (row `program_id(0)` of the step) into the cache."""
    row = tl.program_id(0)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = columns < width
    position = tl.load(position_ptr)
    k = tl.load(k_ptr + row * width + columns, mask=mask)
    v = tl.load(v_ptr + row * width + columns, mask=mask)
    tl.store(k_cache_ptr + (position + row) * width + columns, k, mask=mask)
    tl.store(v_cache_ptr + (position + row) * width + columns, v, mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--replays", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--two-streams", action="store_true")
    parser.add_argument("--wait-before-replays", action="store_true")
    parser.add_argument("--loop-seconds", type=float, default=0.0)
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    device = torch.device("cuda")
    dtype = torch.bfloat16
    width, tokens, layers = args.hidden, args.tokens, args.layers
    max_positions = tokens * (args.replays + 64)
    weights = [
        [torch.randn(width, width, device=device, dtype=dtype) / width**0.5 for _ in range(3)] for _ in range(layers)
    ]
    k_cache = torch.zeros(layers, max_positions, width, device=device, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    position = torch.zeros(1, device=device, dtype=torch.int32)
    x_in = torch.randn(tokens, width, device=device, dtype=dtype)
    out = torch.empty_like(x_in)
    side = torch.cuda.Stream()
    block = 128
    grid = (tokens, triton.cdiv(width, block))

    def step() -> None:
        x = x_in
        for layer in range(layers):
            wq, wk, wv = weights[layer]
            if args.two_streams:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    v = x @ wv
                k = x @ wk
                torch.cuda.current_stream().wait_stream(side)
            else:
                k = x @ wk
                v = x @ wv
            kv_cache_write_kernel[grid](k, v, k_cache[layer], v_cache[layer], position, width, BLOCK=block)
            x = torch.tanh(x @ wq + k)
        out.copy_(x)
        position.add_(tokens)

    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    if args.wait_before_replays:
        print(json.dumps({"captured": True}), flush=True)
        sys.stdin.readline()

    def reset() -> None:
        position.zero_()
        k_cache.zero_()
        v_cache.zero_()

    result: dict = {"layers": layers, "kernel": "kv_cache_write_kernel"}
    if args.loop_seconds:
        reset()
        graph.replay()
        torch.cuda.synchronize()
        reference = out.clone()
        iterations = mismatches = 0
        end = time.monotonic() + args.loop_seconds
        while time.monotonic() < end:
            reset()
            graph.replay()
            torch.cuda.synchronize()
            iterations += 1
            mismatches += int(not torch.equal(out, reference))
        result.update(replays=iterations + 1, loop_iterations=iterations, mismatches=mismatches)
        final = reference
    else:
        reset()
        for _ in range(args.replays):
            graph.replay()
        torch.cuda.synchronize()
        result.update(replays=args.replays)
        final = out
    result["checksum"] = float(final.float().sum()) + float(k_cache.float().abs().sum())
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
