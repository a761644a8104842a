"""``python benchmarks/serve_load.py [--run DIR] [--clients 1 4 16] [--quick] [--json FILE]``:
load test of ``hecate serve`` on 127.0.0.1, bounded in requests and in time.

A server is started in a subprocess on a free port (``--run DIR``, or a fresh run of the
default model made with one training step: the speed does not depend on what the model has
learnt). For each concurrency level, that many client threads send streamed completions
back to back (``--max-tokens`` bytes each, temperature 0.8, a seed per request) until
``--requests`` requests are done or ``--time-limit`` seconds have passed. Reported per level:

- tokens/s: completion bytes of all requests over the level's wall time, and its ratio to the
  peer, `models.decode.generate` on one stream in this process (what ``hecate sample`` runs);
- latency p50 / p99: from sending a request to its ``data: [DONE]``;
- first token p50 / p99: from sending to the first chunk with text (time to first token);
- mean batch: the server's mean batch size over the level's decode steps (``/health``).

With few requests a p99 is close to the maximum. A measurement, not a test: it exits 0.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from models.validation import POSITIVE_INT  # noqa: E402

PROMPTS = ["def ", "import os\n", "class Parser:\n    def __init__(self", "for i in range(",
           "# Copyright", "return self."]
TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "2",
        "--batch-size", "2"]



def make_run(folder: Path, tiny: bool) -> Path:
    """A run directory with one training step (the default model, or a tiny one)."""
    run = folder / "run"
    cmd = [sys.executable, "-m", "models.cli", "train", "--run-dir", str(run), "--steps", "1",
           "--no-progress", *(TINY if tiny else [])]
    if tiny:
        (folder / "corpus.txt").write_text("import os\nprint(os.getcwd())\n" * 60)
        cmd += ["--data", str(folder / "corpus.txt")]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return run


def start_server(run: Path, max_batch: int, max_tokens: int) -> tuple:
    """``hecate serve --port 0`` in a subprocess; returns (process, base URL)."""
    import httpx
    proc = subprocess.Popen([sys.executable, "-m", "models.cli", "serve", "--run", str(run),
                             "--port", "0", "--log-level", "warning", "--max-batch",
                             str(max_batch), "--max-tokens-cap", str(max(max_tokens, 16))],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not found:
        proc.kill()
        raise SystemExit(f"serve_load: the server did not start: {line}{proc.stderr.read()}")
    url = f"http://127.0.0.1:{found.group(1)}"
    for _ in range(400):
        try:
            httpx.get(url + "/health", timeout=5)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("serve_load: the server does not answer /health")


def one_request(client, url: str, i: int, max_tokens: int) -> dict:
    """One streamed completion: latency, time to first text, completion bytes."""
    body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens, "temperature": 0.8,
            "seed": i, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first, tokens = None, 0
    with client.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif first is None and chunk["choices"][0]["text"]:
                first = time.perf_counter() - start
    latency = time.perf_counter() - start
    return {"latency": latency, "first": latency if first is None else first, "tokens": tokens}


def batching(url: str) -> dict:
    import httpx
    return httpx.get(url + "/health", timeout=30).json()["batching"]


def run_level(url: str, clients: int, requests: int, max_tokens: int, time_limit: float,
              offset: int) -> dict:
    """`clients` threads sending requests back to back; bounded by count and time."""
    import httpx
    results, lock = [], threading.Lock()
    counter = iter(range(requests))
    deadline = time.monotonic() + time_limit

    def worker() -> None:
        with httpx.Client(timeout=300) as client:
            while time.monotonic() < deadline:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                r = one_request(client, url, offset + i, max_tokens)
                with lock:
                    results.append(r)

    before = batching(url)
    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    after = batching(url)
    steps = after["steps"] - before["steps"]
    sized = sum(int(k) * (v - before["batch_size_steps"].get(k, 0))
                for k, v in after["batch_size_steps"].items())
    lat = np.array([r["latency"] for r in results])
    first = np.array([r["first"] for r in results])
    tokens = sum(r["tokens"] for r in results)
    return {"clients": clients, "requests": len(results), "tokens": tokens, "seconds": wall,
            "tokens_per_s": tokens / wall,
            "latency_p50": float(np.percentile(lat, 50)),
            "latency_p99": float(np.percentile(lat, 99)),
            "first_token_p50": float(np.percentile(first, 50)),
            "first_token_p99": float(np.percentile(first, 99)),
            "mean_batch": sized / steps if steps else 0.0}


def peer_tokens_per_s(run: Path, max_tokens: int) -> float:
    """`models.decode.generate` on one stream in this process (hecate sample's decoder)."""
    from models import decode
    from models.train import load_run
    cfg, _, params, _, _ = load_run(run)
    prompt = np.frombuffer(PROMPTS[0].encode(), np.uint8).astype(np.int64)
    decode.generate(params, prompt, cfg, 8, temperature=0.8, seed=0)      # warm-up
    start = time.perf_counter()
    decode.generate(params, prompt, cfg, max_tokens, temperature=0.8, seed=0)
    return max_tokens / (time.perf_counter() - start)


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="run directory to serve (default: a fresh run "
                                             "of the default model, one training step)")
    ap.add_argument("--clients", type=POSITIVE_INT, nargs="+", default=[1, 4, 16], metavar="N",
                    help="concurrency levels (default 1 4 16)")
    ap.add_argument("--requests", type=POSITIVE_INT, default=48, metavar="N",
                    help="requests per level, at least 2 per client (default 48)")
    ap.add_argument("--max-tokens", type=POSITIVE_INT, default=64, metavar="N",
                    help="bytes generated per request (default 64)")
    ap.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                    help="seconds per level after which no new request starts (default 60)")
    ap.add_argument("--max-batch", type=POSITIVE_INT, default=16, metavar="N",
                    help="the server's --max-batch (default 16)")
    ap.add_argument("--quick", action="store_true",
                    help="a tiny model, 1 and 4 clients, 8 requests of 16 bytes: a smoke test")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    args = ap.parse_args(argv)
    try:
        import httpx  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise SystemExit('serve_load: needs the serve extra: pip install -e ".[serve]"')
    if args.quick:
        args.clients, args.requests, args.max_tokens = [1, 4], 8, 16
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run or make_run(Path(tmp), tiny=args.quick)
        peer = peer_tokens_per_s(run, args.max_tokens)
        proc, url = start_server(run, args.max_batch, args.max_tokens)
        try:
            run_level(url, 1, 1, 4, args.time_limit, 10 ** 6)     # warm-up, not reported
            rows = [run_level(url, c, max(args.requests, 2 * c), args.max_tokens,
                              args.time_limit, 1000 * c) for c in args.clients]
        finally:
            proc.terminate()
            proc.wait(30)
    served = args.run or ("a fresh tiny run" if args.quick else "a fresh run of the default "
                                                                 "model (1 training step)")
    print(f"hecate serve load test: {served}, {args.max_tokens} bytes per request, "
          f"--max-batch {args.max_batch}")
    print(f"peer: models.decode.generate, one stream in process: {peer:,.0f} tokens/s\n")
    head = (f"{'clients':>7} {'requests':>8} {'tokens/s':>9} {'vs peer':>8} {'lat p50':>8} "
            f"{'lat p99':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'mean batch':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['tokens_per_s']:>9,.0f} "
              f"{r['tokens_per_s'] / peer:>7.2f}x {r['latency_p50']:>7.3f}s "
              f"{r['latency_p99']:>7.3f}s {r['first_token_p50']:>8.3f}s "
              f"{r['first_token_p99']:>8.3f}s {r['mean_batch']:>10.2f}")
    if args.json:
        args.json.write_text(json.dumps({"peer_tokens_per_s": peer, "max_tokens":
                                         args.max_tokens, "levels": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
