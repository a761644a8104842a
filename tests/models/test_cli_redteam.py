"""Red team of the `hecate` command line and `hecate serve`, used as a new user would: bad and
edge flag values, odd data files and run directories, extreme sampling settings, malformed HTTP
requests. The standard: a user mistake is one ``hecate <command>: error: ...`` line on stderr
and exit status 2 (no traceback), nothing silently wrong, HTTP errors are JSON with the right
status. Its findings are fixed; everything runs in this process on a tiny model."""
import json
import threading
from pathlib import Path

import pytest

from models.cli import main

TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "1",
        "--batch-size", "2", "--no-progress"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    f = tmp_path_factory.mktemp("data") / "corpus.txt"
    f.write_text("import os\nprint(os.getcwd())\n" * 60)
    return f


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, corpus):
    """A finished two-step tiny run (its checkpoint, config.json, metrics)."""
    run = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", "--run-dir", str(run), "--data", str(corpus), "--steps", "2",
                 *TINY]) == 0
    return run


def refused(capsys, argv, command):
    """Run `argv`; the refusal must be exit status 2 and one ``hecate <command>: error:``
    line (the informational ``run directory`` line of `train` aside). Returns that line."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines()
             if not ln.startswith(f"hecate {command}: run directory ")]
    assert code == 2, (code, err)
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"hecate {command}: error: "), err
    return lines[0]


# -- flags --------------------------------------------------------------------------------


@pytest.mark.parametrize("flags,words", [
    (["--heads", "3"], "heads (3) must divide d_model (8)"),
    (["--rule", "delt"], "argument --rule: invalid choice: 'delt'"),
    (["--composition", "mag"], "argument --composition: invalid choice: 'mag'"),
    (["--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["--mlp", "17"], "argument --mlp: must be an integer from 0 to 16, got 17"),
    (["--heads", "0"], "argument --heads: must be a positive integer, got 0"),
])
def test_model_flag_mistakes_are_one_line(tmp_path, capsys, corpus, flags, words):
    run = tmp_path / "run"
    line = refused(capsys, ["train", "--run-dir", run, "--data", corpus, *TINY, *flags],
                   "train")
    assert words in line
    assert not run.exists()


@pytest.mark.parametrize("argv", [
    ["train", "--prompt", "x"],
    ["sample", "--run", "RUN", "--top-k", "5"],
])
def test_flag_of_another_command_names_the_command(capsys, run_dir, argv):
    argv = [str(run_dir) if a == "RUN" else a for a in argv]
    line = refused(capsys, argv, argv[0])
    assert "unrecognized arguments" in line


def test_empty_data_path_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(capsys, ["train", "--run-dir", tmp_path / "run", "--data", "", *TINY,
                     "--steps", "1"], "train")


def test_data_file_with_recall_task_is_refused(tmp_path, capsys, corpus):
    refused(capsys, ["train", "--run-dir", tmp_path / "run", "--task", "recall", "--data",
                     corpus, "--d-model", "8", "--layers", "1", "--batch-size", "2",
                     "--steps", "1", "--no-progress"], "train")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_non_finite_parameters_after_the_last_step_are_an_error(tmp_path, capsys, corpus):
    run = tmp_path / "run"
    code = main(["train", "--run-dir", str(run), "--data", str(corpus), *TINY,
                 "--steps", "1", "--lr", "1e308"])
    err = capsys.readouterr().err
    assert code == 2 and "non-finite" in err, err


# -- data files and run directories --------------------------------------------------------


def test_data_shorter_than_two_chunks_is_one_line_and_writes_nothing(tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("abc")
    run = tmp_path / "run"
    line = refused(capsys, ["train", "--run-dir", run, "--data", short, *TINY], "train")
    assert "has 3 bytes: too short for seq_len 8" in line
    assert not run.exists()


def test_non_utf8_text_trains(tmp_path, capsys):
    """Tokens are bytes: Latin-1 text is a valid corpus (no decode step to fail)."""
    data = tmp_path / "latin1.txt"
    data.write_bytes("caf\xe9 na\xefve r\xe9sum\xe9\n".encode("latin-1") * 80)
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--data", str(data), *TINY,
                 "--steps", "1"]) == 0
    capsys.readouterr()
    saved = json.loads((run / "config.json").read_text())
    assert saved["data"]["source"] == str(data) and saved["data"]["train_bytes"] > 0


@pytest.mark.parametrize("command", ["sample", "eval"])
@pytest.mark.parametrize("config", ['{"model": 5', '[1, 2]'])
def test_sample_and_eval_refuse_a_broken_config(tmp_path, capsys, run_dir, command, config):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "config.json").write_text(config)
    line = refused(capsys, [command, "--run", run], command)
    assert "config.json" in line and "delete it to rebuild it" in line


@pytest.mark.parametrize("edit", ["list", "train-list", "seq-len-text", "window-null"])
def test_resume_with_a_malformed_config_is_one_line(tmp_path, capsys, run_dir, edit):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    cfg = json.loads((run / "config.json").read_text())
    if edit == "list":
        cfg = [1, 2]
    elif edit == "train-list":
        cfg["train"] = [1]
    elif edit == "seq-len-text":
        cfg["model"]["seq_len"] = "x"
    else:
        cfg["model"]["window"] = None
    (run / "config.json").write_text(json.dumps(cfg))
    refused(capsys, ["train", "--run-dir", run, "--resume", "--steps", "3", "--no-progress"],
            "train")


def test_empty_checkpoint_file_is_one_line(tmp_path, capsys, run_dir):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "checkpoints" / "last.npz").write_bytes(b"")
    for argv, command in ((["sample", "--run", run], "sample"),
                          (["train", "--run-dir", run, "--resume", "--steps", "3",
                            "--no-progress"], "train")):
        line = refused(capsys, argv, command)
        assert "last.npz is truncated or corrupt" in line


def test_resuming_a_finished_run_reports_the_same_validation_loss(tmp_path, capsys, run_dir):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    assert main(["eval", "--run", str(run)]) == 0
    evaluated = capsys.readouterr().out.split("validation loss ")[1].split()[0]
    assert main(["train", "--run-dir", str(run), "--resume", "--steps", "2",
                 "--no-progress"]) == 0
    reported = capsys.readouterr().out.split("validation loss ")[1].split()[0]
    assert reported == evaluated


# -- sample ----------------------------------------------------------------------------------


def test_sample_non_ascii_and_empty_prompt(capsys, run_dir):
    assert main(["sample", "--run", str(run_dir), "--prompt", "héllo 漢", "--length", "3",
                 "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith("héllo 漢")
    assert main(["sample", "--run", str(run_dir), "--prompt", "", "--length", "3",
                 "--temperature", "0"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n") and len(out.encode("utf-8", "surrogateescape")) >= 2


def test_sample_prints_as_it_draws_and_stops_cleanly_on_ctrl_c(capsys, run_dir, monkeypatch):
    # The text printed piece by piece is the whole sample's; a KeyboardInterrupt part way (a
    # --length far too long) keeps what was printed and exits 130 without a traceback.
    from models import evaluation
    from models.evaluation import load_run, sample_text
    cfg, _, params, _, xp = load_run(run_dir)
    assert main(["sample", "--run", str(run_dir), "--prompt", "pr", "--length", "40",
                 "--seed", "3"]) == 0
    assert capsys.readouterr().out == sample_text(params, cfg, "pr", 40, 0.8, 3, xp) + "\n"
    streamed = evaluation.streamed_text

    def interrupted(*args):
        for k, piece in enumerate(streamed(*args)):
            if k == 5:
                raise KeyboardInterrupt
            yield piece
    monkeypatch.setattr(evaluation, "streamed_text", interrupted)
    assert main(["sample", "--run", str(run_dir), "--prompt", "pr", "--length", "10**11",
                 "--seed", "3"]) == 2   # (not an integer: refused)
    capsys.readouterr()
    assert main(["sample", "--run", str(run_dir), "--prompt", "pr", "--length", "100000000000",
                 "--seed", "3"]) == 130
    captured = capsys.readouterr()
    assert captured.out.startswith("pr") and "Traceback" not in captured.err


def test_sample_prompt_with_non_utf8_bytes(capsys, run_dir):
    code = main(["sample", "--run", str(run_dir), "--prompt", "\udcff\udcfe", "--length", "3",
                 "--temperature", "0"])
    err = capsys.readouterr().err
    assert code in (0, 2) and "unexpected" not in err, err


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_sample_subnormal_temperature(capsys, run_dir):
    code = main(["sample", "--run", str(run_dir), "--length", "3", "--temperature", "5e-324"])
    err = capsys.readouterr().err
    assert code == 0, err


def test_sample_huge_temperature_and_seed(capsys, run_dir):
    assert main(["sample", "--run", str(run_dir), "--length", "4", "--temperature", "1e308",
                 "--seed", str(10 ** 30), "--prompt", "ab"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ab")


# -- bench -----------------------------------------------------------------------------------


def bench(capfd, argv):
    """`hecate bench` in this process (it may re-run itself in a child process, whose stderr
    only capfd sees): (exit status, stderr lines)."""
    try:
        code = main(argv)
    except SystemExit as e:     # see test_bench_bad_section_returns_the_status
        code = e.code
    return code, capfd.readouterr().err.strip().splitlines()


def test_bench_unknown_section_is_one_line(capfd):
    code, lines = bench(capfd, ["bench", "nosuch"])
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("hecate bench: error: unknown section(s) nosuch"), lines


def test_bench_bad_section_returns_the_status(capsys):
    assert main(["bench", "nosuch"]) == 2


def test_bench_unknown_tool_is_one_error_line(capfd, tmp_path):
    code, lines = bench(capfd, ["bench", "gmm", "--tools", "nosuch", "--out",
                                str(tmp_path / "out")])
    assert code == 2 and len(lines) == 1 and "unknown tool(s) nosuch" in lines[0], lines
    assert lines[0].startswith("hecate bench: error: "), lines


def test_bench_out_below_a_file_is_one_line(tmp_path, capfd):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    code = main(["bench", "gmm", "--quick", "--tools", "hecate", "--out",
                 str(blocker / "results")])
    err = capfd.readouterr().err
    assert code != 0 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("hecate bench: error: "), err


# -- serve, over HTTP in this process --------------------------------------------------------


@pytest.fixture(scope="module")
def client(run_dir):
    for name in ("fastapi", "uvicorn", "httpx"):
        pytest.importorskip(name)
    from fastapi import testclient
    from models.serve.app import create_app
    from models.serve.batcher import Batcher
    from models.serve.protocol import Limits
    from models.train import load_run
    cfg, _, params, _, _ = load_run(run_dir)
    app = create_app(Batcher(params, cfg, max_batch=8), "tiny",
                     Limits(max_tokens_cap=300, max_prompt_bytes=64), {"step": 2})
    with testclient.TestClient(app, raise_server_exceptions=False) as c:
        yield c


def post_raw(client, raw: bytes):
    return client.post("/v1/completions", content=raw,
                       headers={"content-type": "application/json"})


def assert_error(r, status):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("raw,param", [
    (b'{"prompt": "x", "max_tokens": NaN}', "max_tokens"),
    (b'{"prompt": "x", "temperature": Infinity}', "temperature"),
    (b'{"prompt": "x", "temperature": 1e999}', "temperature"),
    (b'{"prompt": [[]]}', "prompt"),
    (b'{"prompt": [true]}', "prompt"),
    (b'{"prompt": "x", "stream_options": {"include_usage": "yes"}}', "include_usage"),
    (b'{"prompt": "x", "presence_penalty": {}}', "presence_penalty"),
])
def test_non_json_numbers_and_odd_shapes_are_400(client, raw, param):
    r = post_raw(client, raw)
    assert_error(r, 400)
    assert r.json()["error"]["param"] == param


def test_wrong_method_unknown_path_and_model_are_json(client):
    assert_error(client.get("/v1/completions"), 405)
    assert_error(client.post("/v1/chat/completions", json={}), 404)
    r = client.get("/v1/models/nosuch")
    assert_error(r, 404)
    assert r.json()["error"]["code"] == "model_not_found"


def test_lone_surrogate_prompt_echo_and_max_tokens_zero(client):
    r = post_raw(client, b'{"prompt": "\\ud800", "max_tokens": 0, "echo": true}')
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["text"] == "\ufffd" * 3      # its 3 bytes, each replaced
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}


def test_deeply_nested_body_is_400(client):
    assert_error(post_raw(client, b"[" * 5000 + b"]" * 5000), 400)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_subnormal_temperature_request(client):
    r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 3,
                                             "temperature": 5e-324})
    assert r.status_code in (200, 400), r.text


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_one_bad_request_does_not_end_the_others(run_dir):
    from models.serve.batcher import Batcher
    from models.serve.jobs import Job
    from models.train import load_run
    cfg, _, params, _, _ = load_run(run_dir)
    batcher = Batcher(params, cfg, max_batch=4)
    good, bad = Job(b"abc", 20, 0.0), Job(b"abc", 20, 5e-324, seed=0)
    batcher.submit(good)
    batcher.submit(bad)      # both queued before the loop starts: they share steps
    with batcher:
        assert good.done.wait(30) and bad.done.wait(30)
    assert good.finish_reason == "length", good.finish_reason


def test_a_job_whose_sampling_fails_ends_alone(run_dir, monkeypatch):
    """A sampling error of one job (here forced for temperature 0.5) ends that job with an
    error; the job that shares its steps runs to its length."""
    import models.serve.batcher as batcher_module
    from models.serve.batcher import Batcher
    from models.serve.jobs import Job
    from models.train import load_run
    real = batcher_module.pick_token

    def failing(logits, temperature, top_p, rng):
        if temperature == 0.5:
            raise FloatingPointError("forced")
        return real(logits, temperature, top_p, rng)
    monkeypatch.setattr(batcher_module, "pick_token", failing)
    cfg, _, params, _, _ = load_run(run_dir)
    batcher = Batcher(params, cfg, max_batch=4)
    good, bad = Job(b"abc", 20, 0.0), Job(b"abc", 20, 0.5, seed=0)
    batcher.submit(good)
    batcher.submit(bad)
    with batcher:
        assert good.done.wait(30) and bad.done.wait(30)
    assert good.finish_reason == "length", good.finish_reason
    assert bad.finish_reason == "error", bad.finish_reason


def test_concurrent_streams_in_process(client):
    """A few concurrent streamed greedy requests each add up to the plain request's text."""
    body = {"prompt": "def ", "max_tokens": 12, "temperature": 0}
    whole = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    texts, errors = [None] * 3, []

    def stream(i):
        try:
            r = client.post("/v1/completions", json={**body, "stream": True})
            events = [e[len("data: "):] for e in r.text.strip().split("\n\n")]
            assert events[-1] == "[DONE]"
            texts[i] = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
        except Exception as e:   # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and texts == [whole] * 3, (errors, texts, whole)
