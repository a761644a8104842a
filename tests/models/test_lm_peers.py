"""`models.bench.lm_peers`: the PyTorch peers read exactly Hecate's data, compute what they claim
(causal attention; a carried GRU state equals one pass over the joined chunks), and the
benchmark and its `hecate bench peers` section run end to end. Timings are never asserted."""
import numpy as np
import pytest

from models.bench import harness, lm_peers
from models.data import TextData


@pytest.fixture(scope="module")
def hecate_reads():
    """What `hecate train` (as the benchmark runs it, `--quick` settings) reads: every training
    batch and every validation chunk, in order, recorded at `TextData` itself."""
    cfg, tcfg = lm_peers.configs(quick=True)
    reads = []
    next_batch, val_batches = TextData.next_batch, TextData.val_batches

    def recording_next_batch(self):
        batch = next_batch(self)
        reads.append(("train", batch.copy()))
        return batch

    def recording_val_batches(self, max_batches=None):
        for chunk in val_batches(self, max_batches):
            reads.append(("val", chunk.copy()))
            yield chunk

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TextData, "next_batch", recording_next_batch)
        mp.setattr(TextData, "val_batches", recording_val_batches)
        row = lm_peers.run_hecate(cfg, tcfg)
    assert row["steps"] == tcfg.steps and np.isfinite(row["val_loss"])
    return cfg, tcfg, reads


def _same(reads, other):
    assert [kind for kind, _ in other] == [kind for kind, _ in reads]
    for (kind, a), (_, b) in zip(reads, other):
        assert a.dtype == b.dtype and np.array_equal(a, b), kind


def test_the_peers_data_is_hecates_data(hecate_reads):
    cfg, tcfg, reads = hecate_reads
    n_train = sum(kind == "train" for kind, _ in reads)
    n_val = sum(kind == "val" for kind, _ in reads)
    assert n_train == tcfg.steps == 3
    # one evaluation at step 2 (eval_batches chunks), the final one at step 3
    assert n_val == tcfg.eval_batches + tcfg.final_eval_batches
    data = lm_peers.training_data(cfg, tcfg)
    mine = []
    for step in range(1, tcfg.steps + 1):
        mine.append(("train", data.next_batch()))
        if step % tcfg.eval_every == 0 or step == tcfg.steps:
            count = tcfg.final_eval_batches if step == tcfg.steps else tcfg.eval_batches
            mine += [("val", c) for c in data.val_batches(count)]
    _same(reads, mine)
    # Row b of each batch continues row b of the one before (the next chunk's first input is
    # the last target): what makes carrying a recurrent state across chunks right.
    first, second = (a for kind, a in reads[:2] if kind == "train")
    assert first.shape == (tcfg.batch_size, cfg.seq_len + 1)
    assert np.array_equal(second[:, 0], first[:, -1])
    val = [a for kind, a in reads if kind == "val"][tcfg.eval_batches:]
    assert np.array_equal(val[1][:, 0], val[0][:, -1])


@pytest.fixture
def one_torch_thread():
    """One torch thread, as the benchmark runs (the test machine's cores are shared)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_every_peer_reads_exactly_hecates_batches_and_chunks(hecate_reads, one_torch_thread):
    cfg, tcfg, reads = hecate_reads
    for name in lm_peers.PEERS:
        seen = []
        row = lm_peers.train_peer(name, cfg, tcfg,
                                  on_tokens=lambda kind, a: seen.append((kind, a.copy())))
        _same(reads, seen)
        assert np.isfinite(row["val_loss"]) and row["steps"] == tcfg.steps


def test_the_peers_are_about_hecates_size():
    pytest.importorskip("torch")
    from models.bench.peer_nets import parameter_count
    from models.validation import parameter_count as hecate_count

    cfg, _ = lm_peers.configs()
    hecate = hecate_count(cfg)
    for name in lm_peers.PEERS:
        count = parameter_count(lm_peers.build_peer(name, cfg, 0))
        assert abs(count - hecate) / hecate < 0.02, (name, count, hecate)


def test_the_transformer_is_causal():
    torch = pytest.importorskip("torch")
    from models.bench.peer_nets import CausalTransformer

    torch.manual_seed(0)
    net = CausalTransformer(vocab=32, d_model=16, layers=2, heads=4, mlp=32, seq_len=12)
    tokens = torch.randint(0, 32, (2, 13))
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 7) % 32          # inputs 8.. and targets 7..
    with torch.no_grad():
        def prefix_loss(t):   # the loss of the first 7 positions, computed on the full chunk
            x = net.embed(t[:, :-1])
            for block in net.blocks:
                x = block(x, net.cos, net.sin)
            logits = net.unembed(net.final_norm(x))[:, :7]
            return torch.nn.functional.cross_entropy(logits.reshape(-1, 32),
                                                     t[:, 1:8].reshape(-1))
        assert torch.allclose(prefix_loss(tokens), prefix_loss(changed), atol=1e-6)
        assert not torch.allclose(net.chunk_loss(tokens, None)[0],
                                  net.chunk_loss(changed, None)[0])


def test_rotary_scores_depend_on_relative_position_only():
    torch = pytest.importorskip("torch")
    from models.bench.peer_nets import rotary_tables, rotate

    cos, sin = rotary_tables(16, 8)
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8,
                                                                     dtype=torch.float64)
    cos, sin = cos.double(), sin.double()

    def score(i, j):
        return float((rotate(q, cos[i], sin[i]) * rotate(k, cos[j], sin[j])).sum())
    assert score(3, 1) == pytest.approx(score(12, 10), rel=1e-6)   # float32 tables
    assert score(3, 1) != pytest.approx(score(3, 2), rel=1e-3)


def test_a_carried_gru_state_equals_one_pass_over_the_joined_chunks():
    torch = pytest.importorskip("torch")
    from models.bench.peer_nets import GRULanguageModel

    torch.manual_seed(0)
    net = GRULanguageModel(vocab=32, embed=8, hidden=12, layers=2, carry_state=True).double()
    stream = torch.randint(0, 32, (3, 17))
    with torch.no_grad():
        first, state = net.chunk_loss(stream[:, :9], None)      # chunks overlap by one token
        second, _ = net.chunk_loss(stream[:, 8:], state)
        whole, _ = net.chunk_loss(stream, None)
        assert float((first + second) / 2) == pytest.approx(float(whole), rel=1e-12)
        fresh = GRULanguageModel(vocab=32, embed=8, hidden=12, layers=2).double()
        fresh.load_state_dict(net.state_dict())
        reset, none = fresh.chunk_loss(stream[:, 8:], state)   # ignores the state it is given
        assert none is None and float(reset) != pytest.approx(float(second), rel=1e-6)


def test_quick_run_reports_every_model(quick_benchmark):
    pytest.importorskip("torch")
    stdout, data = quick_benchmark("lm_peers.py", timeout=240)
    assert stdout.startswith("| model | params | steps | val nats/token | train tokens/s |")
    rows = data["results"]
    assert [r["model"] for r in rows] == list(lm_peers.MODELS)
    assert all(np.isfinite(r["val_loss"]) and r["tokens_per_s"] > 0 for r in rows)
    for row in rows[1:]:
        assert row["at_hecate_time"]["steps"] >= 1
        assert np.isfinite(row["at_hecate_time"]["val_loss"])
    assert data["meta"]["torch_threads"] == 1 and data["meta"]["blas_threads"] == "1"


def test_without_torch_the_benchmark_says_how_to_get_it(monkeypatch, capsys):
    monkeypatch.setattr(lm_peers, "torch_available", lambda: False)
    with pytest.raises(SystemExit) as stop:
        lm_peers.main(["--quick"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err == "lm_peers: error: PyTorch is not installed: pip install torch\n"
    text, data = harness.run_peers(True, log=lambda line: None)
    assert "pip install torch" in text and data is None


@pytest.mark.parametrize("sections, expected", [
    ([], [s for s in harness.SECTIONS if s != "peers"]),
    (["all"], [s for s in harness.SECTIONS if s != "peers"]),
    (["all", "peers"], list(harness.SECTIONS)),
    (["peers"], ["peers"]),
])
def test_bench_runs_peers_only_when_named(sections, expected):
    assert harness.parse_args(sections).sections == expected


def test_bad_model_names_are_one_line_errors(capsys):
    with pytest.raises(SystemExit) as stop:
        lm_peers.main(["--models", "hecate,lstm"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("lm_peers: error: --models: unknown model(s) lstm; "
                                       "choose from hecate, transformer, gru2, gru1-carry\n")


def test_steps_fit_into_a_budget():
    assert lm_peers.steps_in(10.0, {"train_s": 4.0, "steps": 100}) == 250
    assert lm_peers.steps_in(0.001, {"train_s": 4.0, "steps": 100}) == 1


def test_docstring_examples_run():
    import doctest

    modules = [lm_peers]
    if lm_peers.torch_available():
        from models.bench import peer_nets
        modules.append(peer_nets)
    for module in modules:
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__
