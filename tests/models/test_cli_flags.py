"""Every numeric flag of `hecate` is checked while the command line is parsed: one line on stderr,
exit status 2, no traceback, nothing written. `--debug` shows the traceback instead. And
`hecate bench` runs from a regular (non-editable) install, which has no benchmarks/ folder.

The CLI runs as a subprocess, as a user runs it; only the two checks that need to fake
something (the memory available, a bug) call `models.cli.main` in this process."""
import ast
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from models.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "1",
        "--batch-size", "2", "--no-progress"]


def hecate(*argv, cwd=ROOT, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "models.cli", *map(str, argv)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


def one_line_error(proc, command: str) -> str:
    """The single stderr line of a refused command (exit status 2, no traceback)."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"hecate {command}: error: "), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A one-step tiny run, for `sample` and `eval`."""
    tmp = tmp_path_factory.mktemp("run")
    data = tmp / "corpus.txt"
    data.write_text("import os\nprint(os.getcwd())\n" * 60)
    proc = hecate("train", "--run-dir", tmp / "run", "--data", data, "--steps", "1", *TINY)
    assert proc.returncode == 0, proc.stderr
    return tmp / "run"


TRAIN_CASES = [   # (flags, what the message must say)
    (["--steps", "-5"], "argument --steps: must be a positive integer, got -5"),
    (["--steps", "0"], "argument --steps: must be a positive integer, got 0"),
    (["--steps", "1.5"], "argument --steps: must be a positive integer, got '1.5'"),
    (["--batch-size", "0"], "argument --batch-size: must be a positive integer, got 0"),
    (["--lr", "-1"], "argument --lr: must be a finite number > 0, got -1"),
    (["--lr", "0"], "argument --lr: must be a finite number > 0, got 0"),
    (["--lr", "nan"], "argument --lr: must be a finite number > 0, got nan"),
    (["--lr", "inf"], "argument --lr: must be a finite number > 0, got inf"),
    (["--seed", "-1"], "argument --seed: must be a non-negative integer, got -1"),
    (["--d-model", "0"], "argument --d-model: must be a positive integer, got 0"),
    (["--layers", "-2"], "argument --layers: must be a positive integer, got -2"),
    (["--window", "0"], "argument --window: must be a positive integer, got 0"),
    (["--levels", "5"], "argument --levels: must be an integer from 0 to 4, got 5"),
    (["--levels", "-1"], "argument --levels: must be an integer from 0 to 4, got -1"),
    (["--gate-penalty", "-0.5"], "argument --gate-penalty: must be a finite number >= 0, got -0.5"),
    (["--gate-penalty", "nan"], "argument --gate-penalty: must be a finite number >= 0, got nan"),
    # the checks across flags, against the defaults when a flag is not given
    (["--seq-len", "8", "--window", "16"], "--seq-len 8 must be >= --window 16"),
    (["--seq-len", "8"], "--seq-len 8 must be >= --window (default: 32)"),
    (["--window", "200"], "--seq-len (default: 128) must be >= --window 200"),
    (["--task", "recall", "--seq-len", "20", "--window", "4"],
     "8 key-value pairs need --seq-len >= 32"),
    (["--resume"], "--resume needs --run-dir DIR"),
]


@pytest.mark.parametrize("flags,message", TRAIN_CASES, ids=[" ".join(c[0]) for c in TRAIN_CASES])
def test_bad_train_flag_is_refused_at_parse_time(tmp_path, flags, message):
    run_dir = tmp_path / "run"
    args = flags if "--resume" in flags else ["--run-dir", run_dir, *flags]
    line = one_line_error(hecate("train", *args), "train")
    assert message in line
    assert not run_dir.exists()          # refused before anything was written


def test_huge_model_is_refused_before_allocating(tmp_path):
    run_dir = tmp_path / "run"
    proc = hecate("train", "--run-dir", run_dir, "--d-model", "2000000", timeout=60)
    line = one_line_error(proc, "train")
    assert "--d-model 2000000" in line and "needs about" in line and "PiB" in line
    assert "is available" in line and "MemoryError" not in line
    assert not run_dir.exists()


def test_memory_estimate_is_compared_with_the_memory_available(tmp_path, capsys, monkeypatch):
    import models.validation as validation
    monkeypatch.setattr(validation, "available_memory", lambda: (64 * 2 ** 20, "a test"))
    code = main(["train", "--run-dir", str(tmp_path / "run"), "--d-model", "512"])
    err = capsys.readouterr().err
    assert code == 2 and "64.0 MiB is available (a test)" in err and "--d-model 512" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command,flags,message", [
    ("sample", ["--length", "-5"], "argument --length: must be a positive integer, got -5"),
    ("sample", ["--length", "0"], "argument --length: must be a positive integer, got 0"),
    ("sample", ["--temperature", "-1"],
     "argument --temperature: must be a finite number >= 0, got -1"),
    ("sample", ["--temperature", "inf"],
     "argument --temperature: must be a finite number >= 0, got inf"),
    ("sample", ["--seed", "-1"], "argument --seed: must be a non-negative integer, got -1"),
    ("eval", ["--batches", "-3"], "argument --batches: must be a positive integer, got -3"),
    ("eval", ["--batches", "0"], "argument --batches: must be a positive integer, got 0"),
])
def test_bad_sample_and_eval_flags_are_refused(trained_run, command, flags, message):
    line = one_line_error(hecate(command, "--run", trained_run, *flags), command)
    assert message in line


def test_temperature_zero_is_greedy_and_allowed(trained_run):
    proc = hecate("sample", "--run", trained_run, "--temperature", "0", "--length", "3",
                  "--prompt", "imp")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("imp")


@pytest.mark.parametrize("flags,message", [
    (["--repeat", "0"], "argument --repeat: must be a positive integer, got 0"),
    (["--threads", "-1"], "argument --threads: must be a non-negative integer, got -1"),
    (["--target-ms", "nan"], "argument --target-ms: must be a finite number >= 0, got nan"),
])
def test_bad_bench_flags_are_refused(tmp_path, flags, message):
    line = one_line_error(hecate("bench", "gmm", "--out", tmp_path / "out", *flags), "bench")
    assert message in line
    assert not (tmp_path / "out").exists()


def test_bad_data_path_and_missing_run_are_one_line(tmp_path):
    proc = hecate("train", "--run-dir", tmp_path / "run", "--data", tmp_path / "missing.txt",
                  *TINY)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == \
        f"hecate train: error: data file not found: {tmp_path / 'missing.txt'}"
    line = one_line_error(hecate("eval", "--run", tmp_path / "nothing"), "eval")
    assert "no run at" in line


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(tmp_path, where):
    args = ["train", "--run-dir", tmp_path / "run", "--data", tmp_path / "missing.txt", *TINY]
    args = ["--debug", *args] if where == "before" else [*args, "--debug"]
    proc = hecate(*args)
    assert proc.returncode != 0
    assert "Traceback (most recent call last)" in proc.stderr
    assert "DataError: data file not found" in proc.stderr


def test_unexpected_error_is_one_line_that_points_to_debug(capsys, monkeypatch):
    import models.cli as cli

    def broken(out=sys.stdout):
        raise RuntimeError("something inside broke")

    monkeypatch.setattr(cli, "demo", broken)
    assert main(["demo"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RuntimeError: something inside broke" in err[0]
    assert "run with --debug for the traceback" in err[0]
    with pytest.raises(RuntimeError):
        main(["--debug", "demo"])


# --------------------------------------------------------------------------------------------
# `hecate bench` from a regular install


def test_installed_packages_never_import_the_benchmarks_folder():
    for path in (ROOT / "models").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and
                     not node.level else [])
            assert not any(n.split(".")[0] == "benchmarks" for n in names), path


def _install_packages(target: Path, work: Path) -> None:
    """What a wheel of this repository installs, into `target`: setuptools' ``build_py`` (the
    packages and package data pyproject.toml lists, exactly as a wheel gets them), run on a copy
    of the sources so that the checkout is left alone. Without setuptools, the same selection
    made by hand from pyproject.toml's package list."""
    src = work / "src"
    keep = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("tape", "ops", "kernels", "models"):
        shutil.copytree(ROOT / name, src / name, ignore=keep)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    if importlib.util.find_spec("setuptools") is not None:
        proc = subprocess.run([sys.executable, "-W", "ignore", "-c",
                               "import setuptools; setuptools.setup()", "-q", "build_py",
                               "--build-lib", str(target)], cwd=src, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return
    tomllib = pytest.importorskip("tomllib", reason="needs setuptools or Python 3.11+")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package in config["packages"]:
        folder = Path(*package.split("."))
        (target / folder).mkdir(parents=True, exist_ok=True)
        patterns = ["*.py", *config.get("package-data", {}).get(package, [])]
        for pattern in patterns:
            for f in (src / folder).glob(pattern):
                (target / folder / f.relative_to(src / folder)).parent.mkdir(parents=True,
                                                                              exist_ok=True)
                shutil.copy(f, target / folder / f.relative_to(src / folder))


def test_bench_runs_from_a_regular_install(tmp_path):
    site = tmp_path / "site-packages"
    _install_packages(site, tmp_path)
    assert not (site / "benchmarks").exists()
    elsewhere = tmp_path / "elsewhere"      # not the checkout: nothing of it is importable
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), HECATE_ADBENCH=str(tmp_path / "no-adbench-files"))
    probe = subprocess.run(
        [sys.executable, "-c", "import models, models.bench as b; "
                               "print(models.__file__); print(b.checkout_root())"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.splitlines() == [str(site / "models" / "__init__.py"), "None"], probe

    proc = hecate("bench", "--help", cwd=elsewhere, env=env)
    assert proc.returncode == 0 and "usage: hecate bench" in proc.stdout, proc.stderr
    out = tmp_path / "results"
    proc = hecate("bench", "gmm", "train", "--quick", "--tools", "hecate", "--out", out,
                  cwd=elsewhere, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert "## ADBench GMM" in report and "generated" in report
    assert "not available in an installed package" in report    # the checkout-only script
