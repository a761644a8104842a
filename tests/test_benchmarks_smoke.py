"""The benchmarks run end to end. It checks that the script works, not how fast
anything is: timings are never asserted."""


def test_overhead_benchmark_quick_run(quick_benchmark):
    stdout, data = quick_benchmark("overhead.py")
    assert "| workload | ops | tool | primal (us) | gradient (us) |" in stdout
    assert "| target (from the issue) | measured | status |" in stdout
    rows = data["results"]
    assert {r["workload"] for r in rows} == {"chain-10", "chain-256x256", "fan-16"}
    assert all(r["grad_s"] > 0 and r["primal_s"] > 0 for r in rows)
    assert [r["tool"] for r in rows if r["workload"] == "chain-10"][0] == "hecate"


def test_checkpoint_benchmark_quick_run(quick_benchmark):
    stdout, data = quick_benchmark("checkpoint.py")   # MISMATCH: checkpointed vs plain loop
    assert "| variant | stored carries | time (s) | time / plain | peak memory (MB) " in stdout
    rows = data["results"]
    assert [r["variant"] for r in rows] == ["plain", "every=8", "revolve s=16"]
    assert all(r["peak_bytes"] > 0 and r["time_s"] > 0 for r in rows)


def test_decode_benchmark_quick_run(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "decode.py"
    proc = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "sampler       bytes   total s   ms/byte  speed-up" in proc.stdout
    assert proc.stdout.count("incremental") == 2


def test_rule_ratios_benchmark_quick_run(quick_benchmark):
    stdout, data = quick_benchmark("rule_ratios.py")
    assert "| # | case | group | size | primal (ms) | gradient (ms) | grad/primal |" in stdout
    assert data["errors"] == [] and len(data["rows"]) > 300
    assert all(r["grad_s"] > 0 and r["primal_s"] > 0 for r in data["rows"])


def test_rule_ratios_benchmark_compiled_quick_run(tmp_path):
    """--compiled checks tape.compile against eager autodiff: a mismatch or an error is
    flagged in the output."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "rule_ratios.py"
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--compiled", "--only",
                           "unary", "--json", str(out)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| compiled gradient (ms) | compiled grad/primal | compiled / eager |" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) > 20 and all(r["group"] == "unary" for r in rows)
    for r in rows:
        assert not {"MISMATCH", "COMPILE-ERROR", "EAGER"} & set(r["compiled_flags"]), r
        assert r["compiled_grad_s"] > 0 and r["stats"]["traces"] == 1
