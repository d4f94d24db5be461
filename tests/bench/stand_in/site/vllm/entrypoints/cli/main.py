"""A stand-in for `python -m vllm.entrypoints.cli.main serve`: the OpenAI endpoints the vLLM bench
uses, greedy 'tokens' derived from the prompt, and vLLM's start-up log lines. CPU only. It loads
no tool: it logs the tool variables it was given and its arguments, for the tests to check."""

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.reply(200 if self.path == "/health" else 404, {})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/completions" or request.get("temperature") != 0:
            self.reply(400, {"error": "only greedy completions"})
            return
        seed = hashlib.sha256(request["prompt"].encode()).digest()
        tokens = [seed[i % len(seed)] for i in range(request["max_tokens"])]
        time.sleep(0.002 * len(tokens))
        self.reply(
            200,
            {
                "id": "cmpl-standin",
                "choices": [{"text": "x" * len(tokens), "token_ids": tokens}],
                "usage": {"completion_tokens": len(tokens)},
            },
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args, _ = parser.parse_known_args()
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    tool = {k: v for k, v in os.environ.items() if k == "CUDA_INJECTION64_PATH" or k.startswith("GPUOBS_FLOOR_")}
    print(f"INFO stand-in tool environment: {json.dumps(tool, sort_keys=True)}", flush=True)
    print(f"INFO stand-in arguments: {json.dumps(sys.argv[1:])}", flush=True)
    time.sleep(0.5)
    print("INFO init engine (profile, create kv cache, warmup model) took 1.25 s (compilation: 0.50 s)", flush=True)
    print("INFO Graph capturing finished in 1 secs, took 0.07 GiB", flush=True)
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
