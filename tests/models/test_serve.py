"""`hecate serve` (models/serve/): batched decoding of streams at different positions against
single-stream `models.decode`, sampling against plain NumPy, the completions API (in process
with FastAPI's TestClient, and a real uvicorn subprocess for streaming clients that go away or
stall, and for SIGTERM), and the command line."""
import codecs
import doctest
import importlib
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from models import decode
from models.cli import main
from models.config import ModelConfig
from models.model import init_params
from models.serve.batcher import Batcher, ServerBusy
from models.serve.jobs import Job
from models.serve.protocol import Limits, RequestError, parse_completion
from models.serve.sampling import nucleus, pick_token
from models.serve.streams import StreamBatch
from models.train import load_run

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "2",
        "--batch-size", "2", "--no-progress"]


def f64_cfg(**kw) -> ModelConfig:
    base = dict(vocab=256, d_model=6, layers=2, window=4, seq_len=8, levels=3,
                periods=(1, 2, 3), dtype="float64")
    base.update(kw)
    return ModelConfig(**base)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    corpus = root / "corpus.txt"
    corpus.write_text("import os\nprint(os.getcwd())\n" * 60)
    run = root / "run"
    assert main(["train", "--run-dir", str(run), "--data", str(corpus), "--steps", "2",
                 *TINY]) == 0
    return run


# -- decoding ------------------------------------------------------------------------------


@pytest.mark.parametrize("rule,composition,key_shift", [
    ("delta", "MAG", False), ("titans", "MAL", True), ("hebbian", "MAG", True),
    ("titans", "MAG", False)])
def test_stream_batch_equals_single_stream_decode(rule, composition, key_shift):
    # Streams join at different steps (so their positions, ring-buffer slots and level firings
    # differ) and one leaves midway; every row must equal decode.step on that stream alone.
    cfg = f64_cfg(rule=rule, composition=composition, key_shift=key_shift)
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


# -- the HTTP API, in process --------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tiny_run):
    testclient = pytest.importorskip("fastapi.testclient")
    from models.serve.app import create_app
    cfg, _, params, _, _ = load_run(tiny_run)
    app = create_app(Batcher(params, cfg, max_batch=8), "tiny",
                     Limits(max_tokens_cap=300, max_prompt_bytes=64), {"step": 2})
    with testclient.TestClient(app) as c:
        yield c


def complete(client, **body):
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def sse_events(text):
    assert text.endswith("\n\n")
    events = text[:-2].split("\n\n")
    assert all(e.startswith("data: ") for e in events)
    return [e[len("data: "):] for e in events]


def test_health_models_and_page(client):
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["model"]["id"] == "tiny"
    assert h["limits"] == {"max_tokens_cap": 300, "max_prompt_bytes": 64}
    assert {"running", "waiting", "batch_size_steps", "mean_batch_size"} <= set(h["batching"])
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny"
    assert client.get("/v1/models/tiny").json()["id"] == "tiny"
    assert client.get("/v1/models/other").status_code == 404
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<textarea" in page.text and "/v1/completions" in page.text
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)     # nothing from a CDN
    missing = client.get("/nope")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def _sample_cli(run, prompt, length, temperature, seed=0):
    done = subprocess.run([sys.executable, "-m", "models.cli", "sample", "--run", str(run),
                           "--prompt", prompt, "--length", str(length), "--temperature",
                           str(temperature), "--seed", str(seed)], capture_output=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8")


@pytest.mark.parametrize("prompt,temperature,seed", [("import", 0, 0), ("", 0, 0),
                                                      ("pri", 0.8, 3)])
def test_completion_equals_hecate_sample(client, tiny_run, prompt, temperature, seed):
    # `hecate sample` prints prompt + continuation (b"\n" stands for an empty prompt) and a
    # newline; the API's text is the continuation alone.
    out = _sample_cli(tiny_run, prompt, 40, temperature, seed)
    r = complete(client, prompt=prompt, max_tokens=40, temperature=temperature, seed=seed)
    fed = prompt or "\n"
    assert out == fed + r["choices"][0]["text"] + "\n"
    assert r["object"] == "text_completion" and r["model"] == "tiny"
    assert r["choices"][0]["finish_reason"] == "length" and r["choices"][0]["index"] == 0
    assert r["usage"] == {"prompt_tokens": len(fed.encode()), "completion_tokens": 40,
                          "total_tokens": len(fed.encode()) + 40}


def test_stream_equals_whole_completion(client):
    body = dict(prompt="import os", max_tokens=120, temperature=1.0, top_p=0.95, seed=7)
    whole = complete(client, **body)
    with client.stream("POST", "/v1/completions", json={**body, "stream": True,
                                                         "stream_options":
                                                             {"include_usage": True}}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.read().decode())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = chunks.pop()
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + \
        ["length"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]


def test_openai_extras(client):
    greedy = complete(client, prompt="x", max_tokens=30, temperature=0)["choices"][0]["text"]
    echo = complete(client, prompt="x", max_tokens=30, temperature=0, echo=True)
    assert echo["choices"][0]["text"] == "x" + greedy
    zero = complete(client, prompt=["x"], max_tokens=0, model="whatever", n=1)
    assert zero["choices"][0] == {"text": "", "index": 0, "logprobs": None,
                                  "finish_reason": "length"}
    ascii_chars = [ch for ch in greedy if ch.isascii()]
    if ascii_chars:        # a stop sequence the greedy text contains ends it right before
        cut = complete(client, prompt="x", max_tokens=30, temperature=0, stop=[ascii_chars[-1]])
        assert cut["choices"][0]["finish_reason"] == "stop"
        assert cut["choices"][0]["text"] == greedy[:greedy.index(ascii_chars[-1])]


BAD = [
    ({"max_tokens": 5}, "prompt", "prompt is required"),
    ({"prompt": 5}, "prompt", "prompt must be a string"),
    ({"prompt": ["a", "b"]}, "prompt", "2 prompts"),
    ({"prompt": [1, 300]}, "prompt", "0 to 255"),
    ({"prompt": "x" * 65}, "prompt", "at most 64"),
    ({"prompt": "x", "max_tokens": -1}, "max_tokens", "from 0 to 300; got -1"),
    ({"prompt": "x", "max_tokens": 301}, "max_tokens", "from 0 to 300; got 301"),
    ({"prompt": "x", "max_tokens": "9"}, "max_tokens", "got a string"),
    ({"prompt": "x", "max_tokens": 2.5}, "max_tokens", "integer"),
    ({"prompt": "x", "temperature": -0.1}, "temperature", ">= 0"),
    ({"prompt": "x", "temperature": "hot"}, "temperature", "a number"),
    ({"prompt": "x", "top_p": 0}, "top_p", "(0, 1]"),
    ({"prompt": "x", "top_p": 1.5}, "top_p", "(0, 1]"),
    ({"prompt": "x", "seed": -3}, "seed", ">= 0"),
    ({"prompt": "x", "stream": "yes"}, "stream", "true or false"),
    ({"prompt": "x", "n": 2}, "n", "not supported"),
    ({"prompt": "x", "logprobs": 3}, "logprobs", "not supported"),
    ({"prompt": "x", "stop": ["a", 1]}, "stop", "list of strings"),
]


@pytest.mark.parametrize("body,param,words", BAD)
def test_bad_request_names_the_field_and_server_keeps_serving(client, body, param, words):
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err
    assert err["type"] == "invalid_request_error" and param in err["message"]
    assert complete(client, prompt="ok", max_tokens=3)["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("raw", [b"{bad json", b"[1, 2]", b"\xff\xfe", b""])
def test_malformed_body(client, raw):
    r = client.post("/v1/completions", content=raw,
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param",
                                                               "code"}
    assert complete(client, prompt="ok", max_tokens=2)["choices"][0]["finish_reason"] == "length"


# -- a real server process -----------------------------------------------------------------


@contextmanager
def server_process(run, *flags):
    """`hecate serve --port 0 ...` in a subprocess; yields (process, base URL)."""
    proc = subprocess.Popen([sys.executable, "-m", "models.cli", "serve", "--run", str(run),
                             "--port", "0", "--log-level", "warning", *flags], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert found, line + proc.stderr.read()
        url = f"http://127.0.0.1:{found.group(1)}"
        httpx = pytest.importorskip("httpx")
        for _ in range(200):
            try:
                httpx.get(url + "/health", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _health(url):
    import httpx
    return httpx.get(url + "/health", timeout=10).json()["batching"]


def _wait_for(predicate, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def live_server(tiny_run):
    pytest.importorskip("uvicorn")
    with server_process(tiny_run, "--max-tokens-cap", "1000000") as (proc, url):
        yield url


def test_disconnected_stream_is_cancelled(live_server):
    import httpx
    before = _health(live_server)["requests"]["cancelled"]
    with httpx.stream("POST", live_server + "/v1/completions", timeout=30,
                      json={"prompt": "a", "max_tokens": 1000000, "stream": True}) as r:
        assert r.status_code == 200
        next(r.iter_lines())          # the stream runs; then the client goes away
    assert _wait_for(lambda: _health(live_server)["requests"]["cancelled"] == before + 1)
    assert _wait_for(lambda: _health(live_server)["running"] == 0)
    # a plain request whose client gives up is cancelled too
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(live_server + "/v1/completions", timeout=0.5,
                   json={"prompt": "b", "max_tokens": 1000000})
    assert _wait_for(lambda: _health(live_server)["requests"]["cancelled"] == before + 2)


def test_stalled_client_does_not_stall_others(live_server):
    # A client that sends a streaming request and never reads: its answer (megabytes of
    # events) fills the socket buffers, yet other requests complete, and its own decoding
    # runs to the end (the decode loop never waits for a reader).
    import httpx
    host, port = live_server.removeprefix("http://").split(":")
    before = _health(live_server)["requests"]
    body = json.dumps({"prompt": "s", "max_tokens": 5000, "stream": True}).encode()
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)   # fills up sooner
    stalled.connect((host, int(port)))
    try:
        stalled.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                        b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                        b"\r\n\r\n" + body)
        assert _wait_for(lambda: _health(live_server)["requests"]["submitted"] ==
                         before["submitted"] + 1)
        for i in range(3):
            r = httpx.post(live_server + "/v1/completions", timeout=30,
                           json={"prompt": f"q{i}", "max_tokens": 20, "temperature": 0})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 20
        assert _wait_for(lambda: _health(live_server)["requests"]["length"] ==
                         before["length"] + 4)
        received = b""            # all of it is still delivered once the client reads
        while not (received.endswith(b"\r\n0\r\n\r\n") and b"[DONE]" in received[-40:]):
            more = stalled.recv(1 << 16)
            assert more, received[-200:]
            received += more
        assert b'"finish_reason": "length"' in received
    finally:
        stalled.close()


def test_concurrent_streams_are_correct(live_server):
    import httpx
    results = {}

    def one(i):
        body = {"prompt": "x" * (i + 1), "max_tokens": 400, "temperature": 0.9, "seed": i}
        whole = httpx.post(live_server + "/v1/completions", json=body, timeout=60).json()
        with httpx.stream("POST", live_server + "/v1/completions", timeout=60,
                          json={**body, "stream": True}) as r:
            events = sse_events("".join(r.iter_text()))
        text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
        results[i] = (whole["choices"][0]["text"], text)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 6 and all(a == b for a, b in results.values())


def test_sigterm_ends_streams_and_exits_zero(tiny_run):
    pytest.importorskip("uvicorn")
    import httpx
    with server_process(tiny_run, "--max-tokens-cap", "10000000", "--shutdown-grace",
                        "0.5") as (proc, url):
        with httpx.stream("POST", url + "/v1/completions", timeout=30,
                          json={"prompt": "a", "max_tokens": 10000000, "stream": True}) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            proc.send_signal(signal.SIGTERM)
            events = [line for line in lines if line]
        assert events[-1] == "data: [DONE]"
        last = json.loads(events[-2][len("data: "):])
        assert last["choices"][0]["finish_reason"] == "abort"
        assert proc.wait(timeout=20) == 0
        assert "stopped" in proc.stderr.read()


# -- the command line ----------------------------------------------------------------------


def _one_line_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_serve_flag_errors(capsys, tiny_run):
    assert "--port: must be an integer from 0 to 65535" in _one_line_error(
        capsys, ["serve", "--run", str(tiny_run), "--port", "70000"])
    assert "--max-batch: must be a positive integer" in _one_line_error(
        capsys, ["serve", "--run", str(tiny_run), "--max-batch", "0"])
    assert "--run" in _one_line_error(capsys, ["serve"])
    assert "no run at" in _one_line_error(capsys, ["serve", "--run", "/nonexistent/run"])
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        err = _one_line_error(capsys, ["serve", "--run", str(tiny_run), "--port",
                                       str(taken.getsockname()[1])])
        assert "cannot listen on 127.0.0.1" in err and "--port" in err
    finally:
        taken.close()


def test_serve_without_the_extra(capsys, tiny_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)     # import fastapi -> ImportError
    err = _one_line_error(capsys, ["serve", "--run", str(tiny_run)])
    assert 'pip install -e ".[serve]"' in err


@pytest.mark.parametrize("module", ["streams", "sampling", "jobs", "batcher", "protocol",
                                   "command", "server"])
def test_docstring_examples(module):
    if module == "server":
        pytest.importorskip("uvicorn")
    result = doctest.testmod(importlib.import_module(f"models.serve.{module}"))
    assert result.failed == 0 and result.attempted > 0
