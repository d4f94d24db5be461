"""A PyTorch program that keeps launching (cuBLAS matmul, elementwise) for --seconds or until
--stop exists, so a daemon can switch its mode while it runs. Prints one JSON line at the end."""

import argparse
import json
import os
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--stop", help="a path: the loop ends once it exists")
    args = parser.parse_args()
    torch.manual_seed(0)
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1 << 20, device="cuda")
    steps = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end and not (args.stop and os.path.exists(args.stop)):
        c = a @ b
        y = torch.nn.functional.silu(x) * 2.0
        torch.cuda.synchronize()
        steps += 1
        time.sleep(0.01)
    time.sleep(0.1)
    print(json.dumps({"steps": steps, "checksum": float(c.float().sum() + y.sum())}))


if __name__ == "__main__":
    main()
