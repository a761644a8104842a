"""`hecate serve`'s parts that need no web framework (models/serve/): batched decoding of
streams at different positions against single-stream `models.decode`, the decode loop against
`decode.generate`, sampling against plain NumPy and `decode._pick`, incremental UTF-8 and stop
sequences, request validation, the modules' docstring examples. HTTP: test_serve_http.py."""
import doctest
import importlib
import time

import numpy as np
import pytest

from models import decode
from models.config import ModelConfig
from models.model import init_params
from models.serve.batcher import Batcher, ServerBusy
from models.serve.jobs import Job
from models.serve.protocol import Limits, RequestError, parse_completion
from models.serve.sampling import nucleus, pick_token
from models.serve.streams import StreamBatch


def f64_cfg(**kw) -> ModelConfig:
    base = dict(vocab=256, d_model=6, layers=2, window=4, seq_len=8, levels=3,
                periods=(1, 2, 3), dtype="float64")
    base.update(kw)
    return ModelConfig(**base)


# -- decoding ------------------------------------------------------------------------------


@pytest.mark.parametrize("rule,composition,key_shift,extra", [
    ("delta", "MAG", False, {}), ("titans", "MAL", True, {}), ("hebbian", "MAG", True, {}),
    ("titans", "MAG", False, {}),
    ("delta", "MAG", False, dict(d_model=8, heads=2, mlp=2, rotary=True, bounded_theta=True)),
    ("titans", "MAL", True, dict(d_model=8, heads=4, mlp=1, rotary=True))])
def test_stream_batch_equals_single_stream_decode(rule, composition, key_shift, extra):
    # Streams join at different steps (so their positions, ring-buffer slots and level firings
    # differ) and one leaves midway; every row must equal decode.step on that stream alone.
    cfg = f64_cfg(rule=rule, composition=composition, key_shift=key_shift, **extra)
    params = init_params(cfg, seed=3)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 256, size=n) for n in (17, 11, 14, 6)]
    joins = [0, 2, 3, 5]                      # the step at which each stream joins
    leaves = {3: 9}                           # stream 3 leaves after 9 - 5 = 4 tokens
    batch = StreamBatch(params, cfg)
    alone = [decode.init_state(params, cfg, 1) for _ in seqs]
    rows, fed, checked = [], [0] * len(seqs), 0
    for t in range(30):
        for s, j in enumerate(joins):
            if j == t:
                batch.add()
                rows.append(s)
        drop = [i for i, s in enumerate(rows) if leaves.get(s) == t or fed[s] == len(seqs[s])]
        if drop:
            batch.keep([i for i in range(len(rows)) if i not in drop])
            rows = [s for i, s in enumerate(rows) if i not in drop]
        if not rows:
            continue
        tokens = np.array([seqs[s][fed[s]] for s in rows])
        got = batch.step(tokens)
        for i, s in enumerate(rows):
            want, alone[s] = decode.step(params, cfg, alone[s], tokens[i:i + 1])
            assert np.max(np.abs(got[i] - want[0])) < 1e-10, (s, fed[s])
            fed[s] += 1
            checked += 1
        assert batch.positions.tolist() == [fed[s] for s in rows]
    assert checked == 17 + 11 + 14 + 4


def test_stream_batch_rejects_bad_input():
    cfg = f64_cfg()
    batch = StreamBatch(init_params(cfg, seed=0), cfg)
    with pytest.raises(ValueError, match="at least one stream"):
        batch.step([1])
    batch.add()
    with pytest.raises(ValueError, match=r"ints in \[0, 256\)"):
        batch.step([256])
    with pytest.raises(ValueError, match="distinct ints"):
        batch.keep([0, 0])


def _run_jobs(params, cfg, jobs, max_batch):
    batcher = Batcher(params, cfg, max_batch=max_batch)
    for job in jobs:               # all queued before the loop starts: they share steps
        batcher.submit(job)
    with batcher:
        for job in jobs:
            assert job.done.wait(60)
    return batcher.stats()


@pytest.mark.parametrize("max_batch", (8, 2))
def test_batcher_equals_generate(max_batch):
    # Five concurrent requests with prompts of 1 to 19 bytes, greedy and seeded sampling:
    # each one's bytes equal decode.generate for that request alone. With max_batch 2 the
    # later ones wait and join as earlier ones leave (continuous batching).
    cfg = f64_cfg()
    params = init_params(cfg, seed=1)
    specs = [(b"a", 12, 0.0, 1.0, None), (b"import os\nprint(os.", 9, 0.8, 1.0, 5),
             (b"def f(x):", 15, 0.0, 1.0, None), (b"ab", 7, 1.3, 1.0, 11),
             (b"0123456", 10, 0.7, 0.9, 2)]
    jobs = [Job(p, n, t, tp, seed) for p, n, t, tp, seed in specs]
    stats = _run_jobs(params, cfg, jobs, max_batch)
    for job, (prompt, n, temperature, top_p, seed) in zip(jobs, specs):
        assert job.finish_reason == "length" and len(job.generated) == n
        if top_p == 1.0:
            want = decode.generate(params, np.frombuffer(prompt, np.uint8), cfg, n,
                                   temperature=temperature, seed=seed or 0)
            assert bytes(job.generated) == bytes(want[len(prompt):].tolist())
    assert stats["max_batch_size_seen"] == min(max_batch, 5)
    assert stats["requests"]["length"] == 5 and stats["running"] == 0
    assert stats["completion_tokens"] == sum(s[1] for s in specs)
    # a seeded top-p request alone gives the same bytes as inside the batch
    alone = Job(specs[4][0], 10, 0.7, 0.9, 2)
    _run_jobs(params, cfg, [alone], 1)
    assert alone.generated == jobs[4].generated


def test_batcher_cancel_busy_and_shutdown():
    cfg = f64_cfg()
    params = init_params(cfg, seed=1)
    batcher = Batcher(params, cfg, max_batch=1, max_waiting=1)
    long_job, waiting = Job(b"x", 10 ** 6, 1.0, seed=0), Job(b"y", 5, 0.0)
    batcher.submit(long_job)
    batcher.submit(waiting)
    with pytest.raises(ServerBusy, match="retry later"):
        batcher.submit(Job(b"z", 5))
    with batcher:
        while len(long_job.generated) < 3:
            time.sleep(0.01)
        long_job.cancel()
        assert waiting.done.wait(30) and waiting.finish_reason == "length"
        assert long_job.finish_reason == "cancelled"
        endless = batcher.submit(Job(b"x", 10 ** 6, 1.0, seed=1))
        batcher.begin_shutdown(0.2)
        assert endless.done.wait(30) and endless.finish_reason == "abort"
        assert batcher.stats()["requests"]["abort"] == 1


# -- sampling ------------------------------------------------------------------------------


def plain_nucleus(prob, top_p):
    """The nucleus by a plain loop: most likely first, until the mass reaches top_p."""
    order = sorted(range(len(prob)), key=lambda i: -prob[i])
    kept, mass = [], 0.0
    for i in order:
        kept.append(i)
        mass += prob[i]
        if mass >= top_p:
            break
    out = np.zeros(len(prob))
    out[kept] = prob[kept] / sum(prob[i] for i in kept)
    return out


@pytest.mark.parametrize("top_p", (0.05, 0.3, 0.5, 0.9, 0.999))
def test_top_p_against_plain_numpy(top_p):
    rng = np.random.default_rng(4)
    logits = rng.standard_normal(256) * 3
    temperature = 0.7
    z = logits / temperature
    prob = np.exp(z - z.max())
    prob /= prob.sum()
    want = plain_nucleus(prob, top_p)
    assert np.allclose(nucleus(prob, top_p), want, rtol=1e-12, atol=1e-15)
    # the draws follow the nucleus distribution: same generator state, same token
    a, b = np.random.default_rng(9), np.random.default_rng(9)
    picks = [pick_token(logits, temperature, top_p, a) for _ in range(300)]
    assert picks == [int(b.choice(256, p=want)) for _ in range(300)]
    assert set(picks) <= set(np.flatnonzero(want).tolist())


def test_pick_token_follows_decode_pick():
    # top_p = 1 is exactly decode._pick, draw for draw (hecate sample's rule)
    logits = np.random.default_rng(1).standard_normal(256)
    for temperature in (0.0, 0.5, 1.0, 2.0):
        a, b = np.random.default_rng(3), np.random.default_rng(3)
        assert [pick_token(logits, temperature, 1.0, a) for _ in range(50)] == \
            [decode._pick(logits, temperature, b) for _ in range(50)]


# -- text: incremental UTF-8 and stop sequences --------------------------------------------


def _feed(job, data):
    pieces = []
    for i, byte in enumerate(data):
        done = job.accept(byte)
        text, reason = job.take()
        pieces.append(text)
        if done:
            return pieces, reason
    return pieces, job.finish_reason


def test_streamed_text_never_splits_a_character():
    text = "naïve café — 日本語 🙂 done"
    raw = text.encode()
    pieces, reason = _feed(Job(b"p", len(raw)), raw)
    assert reason == "length" and "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    # arbitrary bytes: the pieces add up to what one bytes.decode(errors="replace") gives
    rng = np.random.default_rng(0)
    for n in (1, 7, 64, 300):
        data = bytes(rng.integers(0, 256, size=n).tolist())
        pieces, _ = _feed(Job(b"p", n), data)
        assert "".join(pieces) == data.decode("utf-8", errors="replace")


def test_stop_sequences():
    job = Job(b"p", 100, stop=[b"END", b"\n\n"])
    pieces, reason = _feed(job, b"abc EN-x E\n\nrest")
    assert reason == "stop" and "".join(pieces) == "abc EN-x E"
    assert len(job.generated) == len(b"abc EN-x E\n\n")
    # a held-back tail that turns out not to be a stop is released; never a partial stop
    job = Job(b"p", 100, stop=["日本".encode()])
    pieces, reason = _feed(job, "x日y日本z".encode())
    assert reason == "stop" and "".join(pieces) == "x日y"     # the held-back 日 never shows


# -- request validation ----------------------------------------------------------------------


def test_parse_completion_accepts_openai_shapes():
    lim = Limits(max_tokens_cap=50, max_prompt_bytes=10)
    assert parse_completion({"prompt": ["hi"]}, lim).prompt == b"hi"
    assert parse_completion({"prompt": [104, 105]}, lim).prompt == b"hi"
    assert parse_completion({"prompt": [[104, 105]]}, lim).prompt == b"hi"
    req = parse_completion({"prompt": "", "model": "x", "n": 1, "user": "u", "logprobs": None,
                            "presence_penalty": 0, "max_tokens": None, "unknown": [1],
                            "stream_options": {"include_usage": True}, "stop": "\n"}, lim)
    assert req.prompt == b"\n" and req.max_tokens == 16 and req.include_usage
    assert req.stop == (b"\n",)
    with pytest.raises(RequestError, match="12 bytes of UTF-8; this server takes at most 10"):
        parse_completion({"prompt": "é" * 6}, lim)


@pytest.mark.parametrize("module", ["streams", "sampling", "jobs", "batcher", "protocol",
                                   "command", "server"])
def test_docstring_examples(module):
    if module == "server":
        pytest.importorskip("uvicorn")
    result = doctest.testmod(importlib.import_module(f"models.serve.{module}"))
    assert result.failed == 0 and result.attempted > 0
