"""A small transformer decode step (8 layers, hidden 1024, batch 8, KV cache 512) captured into a
CUDA graph and replayed, as vLLM decodes. Prints tokens/s over --replays replays and the median
step time."""

import json
import statistics
import sys

import torch
import torch.nn.functional as F

LAYERS, HIDDEN, HEADS, BATCH, CACHE, FFN = 8, 1024, 8, 8, 512, 4096


def main() -> int:
    replays = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    weights = [
        dict(
            qkv=torch.randn(HIDDEN, 3 * HIDDEN, device=dev, dtype=dt) * 0.02,
            o=torch.randn(HIDDEN, HIDDEN, device=dev, dtype=dt) * 0.02,
            up=torch.randn(HIDDEN, 2 * FFN, device=dev, dtype=dt) * 0.02,
            down=torch.randn(FFN, HIDDEN, device=dev, dtype=dt) * 0.02,
            k_cache=torch.randn(BATCH, HEADS, CACHE, HIDDEN // HEADS, device=dev, dtype=dt),
            v_cache=torch.randn(BATCH, HEADS, CACHE, HIDDEN // HEADS, device=dev, dtype=dt),
        )
        for _ in range(LAYERS)
    ]
    x = torch.randn(BATCH, HIDDEN, device=dev, dtype=dt)

    def step(h: torch.Tensor) -> torch.Tensor:
        for w in weights:
            n = F.rms_norm(h, (HIDDEN,))
            q, k, v = (n @ w["qkv"]).split(HIDDEN, dim=-1)
            q = q.view(BATCH, HEADS, 1, HIDDEN // HEADS)
            attn = F.scaled_dot_product_attention(q, w["k_cache"], w["v_cache"])
            h = h + attn.reshape(BATCH, HIDDEN) @ w["o"]
            gate, up = (F.rms_norm(h, (HIDDEN,)) @ w["up"]).chunk(2, dim=-1)
            h = h + (F.silu(gate) * up) @ w["down"]
        return h

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(x)
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    total_start, total_stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total_start.record()
    for _ in range(replays):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        times.append((start, stop))
    total_stop.record()
    torch.cuda.synchronize()
    step_ms = statistics.median(s.elapsed_time(e) for s, e in times)
    total_s = total_start.elapsed_time(total_stop) / 1000
    if len(sys.argv) > 2:  # keep the output for a byte-for-byte comparison
        torch.save(out.cpu(), sys.argv[2])
    print(
        json.dumps(
            {
                "median_ms": step_ms,
                "tokens_per_s": BATCH * replays / total_s,
                "checksum": float(out.float().sum().item()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
