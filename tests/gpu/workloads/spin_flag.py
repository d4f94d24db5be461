"""A Triton kernel that spins while a flag in device memory is set: a hang on demand. Prints
{"spinning": true, "grid": N} once the kernel runs, then releases it (a copy on another stream
clears the flag) when a line arrives on stdin, or after --release-after seconds."""

import argparse
import json
import sys
import time

import torch
import triton
import triton.language as tl


@triton.jit
def spin_while_flag_kernel(flag_ptr, out_ptr):
    spins = 0
    flag = tl.load(flag_ptr, volatile=True)
    while flag != 0:
        spins += 1
        flag = tl.load(flag_ptr, volatile=True)
    tl.store(out_ptr + tl.program_id(0), 1 + spins * 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", type=int, default=6)
    parser.add_argument("--release-after", type=float, default=0.0, help="0: wait for a line on stdin")
    args = parser.parse_args()
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = torch.zeros(args.grid, dtype=torch.int32, device="cuda")
    zero = torch.zeros(1, dtype=torch.int32).pin_memory()
    spin_while_flag_kernel[(args.grid,)](flag, out, num_warps=1)  # compiles; flag clear: returns at once
    torch.cuda.synchronize()
    flag.fill_(1)
    out.zero_()
    torch.cuda.synchronize()
    spin_stream, release_stream = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(spin_stream):
        spin_while_flag_kernel[(args.grid,)](flag, out, num_warps=1)
    started = time.monotonic()
    print(json.dumps({"spinning": True, "grid": args.grid}), flush=True)
    if args.release_after:
        time.sleep(args.release_after)
    else:
        sys.stdin.readline()
    still_running = not spin_stream.query()
    with torch.cuda.stream(release_stream):
        flag.copy_(zero, non_blocking=True)
    spin_stream.synchronize()
    print(
        json.dumps(
            {
                "released": True,
                "was_running": still_running,
                "blocks_done": int(out.sum()),
                "spun_s": round(time.monotonic() - started, 3),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
