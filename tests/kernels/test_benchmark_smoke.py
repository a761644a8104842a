"""benchmarks/kernels.py runs end to end on its smallest size. Timings are never asserted."""


def test_kernel_benchmark_quick_run(quick_benchmark):
    stdout, data = quick_benchmark("kernels.py", timeout=300)
    assert "| pair | d | s | tool | fwd+bwd (ms) | tokens/s |" in stdout
    rows = data["cpu"]
    assert {r["pair"] for r in rows} == {"swa", "delta", "titans", "hebbian"}
    assert {(r["d"], r["s"]) for r in rows} == {(64, 512)}
    assert all(r["tokens_per_s"] > 0 for r in rows)
    ckpt = {r["pair"]: r["peak_mib"] for r in rows if r["tool"] == "hecate-ckpt"}
    full = {r["pair"]: r["peak_mib"] for r in rows if r["tool"] == "hecate"}
    assert all(ckpt[p] < full[p] for p in ckpt)   # checkpointing keeps fewer states
