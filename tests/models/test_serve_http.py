"""`hecate serve` over HTTP: the completions API in process (FastAPI's TestClient) against
`hecate sample` and against itself streamed, every bad request, then a real uvicorn subprocess
for clients that go away or stall, concurrent streams and SIGTERM; the command line's errors.
Skips without the `serve` extra (fastapi, uvicorn, httpx)."""
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from models.cli import main
from models.serve.batcher import Batcher
from models.serve.protocol import Limits
from models.train import load_run

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "2",
        "--batch-size", "2", "--no-progress"]


def need_serve_extra() -> None:
    """Skip unless the `serve` extra (fastapi, uvicorn, httpx) is installed."""
    for name in ("fastapi", "uvicorn", "httpx"):
        pytest.importorskip(name)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    corpus = root / "corpus.txt"
    corpus.write_text("import os\nprint(os.getcwd())\n" * 60)
    run = root / "run"
    assert main(["train", "--run-dir", str(run), "--data", str(corpus), "--steps", "2",
                 *TINY]) == 0
    return run


# -- the HTTP API, in process --------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tiny_run):
    need_serve_extra()
    from fastapi import testclient
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
        import httpx
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
    need_serve_extra()
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
    need_serve_extra()
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
    need_serve_extra()
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


def test_oversized_body_and_odd_text(client):
    big = b'{"prompt": "' + b"x" * (16 * 64 + 65536) + b'"}'
    r = client.post("/v1/completions", content=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    # a lone surrogate (a JSON escape) is fed as its bytes and echoed as U+FFFD
    r = client.post("/v1/completions", content=b'{"prompt": "a\\ud800", "max_tokens": 2, '
                                                b'"echo": true, "stream": true}')
    events = sse_events(r.read().decode())
    assert json.loads(events[0])["choices"][0]["text"] == "a\ufffd\ufffd\ufffd"
    assert events[-1] == "[DONE]"


def test_load_benchmark_quick_run(quick_benchmark):
    # benchmarks/serve_load.py --quick keeps working (a tiny run; timings are not asserted)
    need_serve_extra()
    stdout, data = quick_benchmark("serve_load.py", timeout=300)
    assert [row["clients"] for row in data["levels"]] == [1, 4]
    assert all(row["requests"] == 8 and row["tokens"] == 8 * 16 for row in data["levels"])
    assert "tokens/s" in stdout
