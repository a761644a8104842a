"""`hecate train / sample / eval`: a tiny end-to-end run and every bad-input error (exit code 2,
one clear message, no traceback)."""
import subprocess
import sys
from pathlib import Path

import pytest

from models.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "1",
        "--batch-size", "2", "--no-progress"]


@pytest.fixture
def text_file(tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text("import os\nprint(os.getcwd())\n" * 60)
    return f


def _err(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err


def test_train_eval_sample_end_to_end(tmp_path, text_file, capsys):
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--data", str(text_file), "--steps", "2",
                 *TINY]) == 0
    out = capsys.readouterr().out
    assert "validation loss" in out and "bits per byte" in out and "unigram" in out
    assert (run / "checkpoints" / "last.npz").is_file()
    assert main(["eval", "--run", str(run), "--batches", "2"]) == 0
    assert "bits per byte" in capsys.readouterr().out
    assert main(["sample", "--run", str(run), "--prompt", "import", "--length", "5"]) == 0
    assert capsys.readouterr().out.startswith("import")
    # resume to more steps; a model flag that contradicts the checkpoint is refused
    assert main(["train", "--run-dir", str(run), "--resume", "--steps", "3",
                 "--no-progress"]) == 0
    capsys.readouterr()
    err = _err(capsys, ["train", "--run-dir", str(run), "--resume", "--d-model", "16",
                        "--no-progress"])
    assert "d_model: 8 (checkpoint) vs 16 (this run)" in err


def test_missing_data_file(tmp_path, capsys):
    err = _err(capsys, ["train", "--run-dir", str(tmp_path / "r"), "--data",
                        str(tmp_path / "nope.txt"), *TINY])
    assert "data file not found" in err and "nope.txt" in err


def test_empty_and_binary_corpus(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "is empty" in _err(capsys, ["train", "--run-dir", str(tmp_path / "r"), "--data",
                                       str(empty), *TINY])
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(32)) * 100)
    assert "binary" in _err(capsys, ["train", "--run-dir", str(tmp_path / "r"), "--data",
                                     str(blob), *TINY])


def test_seq_len_below_window(tmp_path, capsys):
    err = _err(capsys, ["train", "--run-dir", str(tmp_path / "r"), "--seq-len", "8",
                        "--window", "16"])
    assert "--seq-len 8 must be >= --window 16" in err


def test_gpu_without_gpu(tmp_path, capsys, monkeypatch):
    import kernels.dispatch as dispatch
    if dispatch.detect_gpu() is not None:
        pytest.skip("a GPU is present")
    err = _err(capsys, ["train", "--run-dir", str(tmp_path / "r"), "--device", "gpu", *TINY])
    assert "no GPU available" in err and "detect_gpu" in err


def test_corrupt_checkpoint_via_cli(tmp_path, text_file, capsys):
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--data", str(text_file), "--steps", "1",
                 *TINY]) == 0
    capsys.readouterr()
    last = run / "checkpoints" / "last.npz"
    last.write_bytes(last.read_bytes()[:-50])
    for argv in (["eval", "--run", str(run)],
                 ["train", "--run-dir", str(run), "--resume", "--no-progress"]):
        err = _err(capsys, argv)
        assert "last.npz" in err and "corrupt" in err
    err = _err(capsys, ["eval", "--run", str(tmp_path / "nothing")])
    assert "no run at" in err


def test_subprocess_error_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "models.cli", "train", "--data",
                           str(tmp_path / "missing.txt"), "--run-dir", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "data file not found" in proc.stderr and "Traceback" not in proc.stderr
