"""Peak memory of one gradient call, eager `autodiff` against its `tape.compile`d replay.

    python benchmarks/compile_memory.py [--json PATH]

Each workload is called once to warm up (and, compiled, to trace), then once under
`tracemalloc`, which sees NumPy's array allocations: the peak is the most memory held at once
during the call, above what was held when it started. Workloads: the 50-op chain on 256x256
(`models.bench.overhead`), ADBench GMM (d=2, K=5, n=1000) and LSTM (l=2, c=1024, generated), and
one training step of the default model (`models.train_step`).
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from models import model  # noqa: E402
from models.bench.adbench import generate, gmm, lstm  # noqa: E402
from models.bench.adbench.runners import compiled_autodiff  # noqa: E402
from models.bench.overhead import chain  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.train_step import TrainStep  # noqa: E402
from tape import Active, Duplicated, Reverse, autodiff, make_zero  # noqa: E402


def peak_bytes(call) -> int:
    call()   # warm-up: compiled, this call traces
    call()   # and this one traces again to confirm the program (tape.compile runs f once a call)
    tracemalloc.start()
    # A long compiled program replays cut into segments while tracemalloc traces (see
    # tape/program_split.py); the first call under it compiles them once (36 MB of source and
    # code objects for the LSTM, freed again), which is not the steady state measured here.
    call()
    peaks = []
    for _ in range(3):   # the least of three: a collection of reference cycles may fall inside
        gc.collect()
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        call()
        _, peak = tracemalloc.get_traced_memory()
        peaks.append(peak - start)
    tracemalloc.stop()
    return min(peaks)


def workloads(differentiate):
    x = np.random.default_rng(0).standard_normal((256, 256))
    # A compiled LSTM is one generated function of ~60 lines per character; tracemalloc looks
    # up the line of each allocation from the function's start, so its cost grows with the
    # square of the sequence (c=256 takes minutes): c=64 keeps the measurement short.
    gmm_input, lstm_input = generate.gmm(2, 5, 1000), generate.lstm(2, 64)
    cfg = ModelConfig()
    params, state = model.init_params(cfg, 0), model.init_state(cfg, 8)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab, (8, cfg.seq_len + 1))
    grads = make_zero(params)
    step = TrainStep(cfg, compiled=differentiate is not autodiff)

    def chain_grad():
        differentiate(Reverse, lambda v: chain(np, v), Active, Duplicated(x, np.zeros_like(x)))
    return {
        "chain 256x256": chain_grad,
        "GMM d2 K5": lambda: gmm.gradient(gmm_input, differentiate=differentiate),
        "LSTM l2 c64": lambda: lstm.gradient(lstm_input, differentiate=differentiate),
        "train step (default model)": lambda: step(params, grads, tokens, state),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    eager, compiled = workloads(autodiff), workloads(compiled_autodiff())
    rows = []
    print(f"{'workload':28} {'eager MB':>9} {'compiled MB':>12} {'ratio':>6}")
    for name in eager:
        e, c = peak_bytes(eager[name]), peak_bytes(compiled[name])
        rows.append({"workload": name, "eager_bytes": e, "compiled_bytes": c})
        print(f"{name:28} {e / 2**20:9.2f} {c / 2**20:12.2f} {c / max(e, 1):6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
