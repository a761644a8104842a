"""Option combinations of the language model that the other model tests leave out, against
independent references: window 1, a one-token chunk, a batch of one, a window as long as the
chunk, four levels, chunk lengths that are not multiples of the level periods or of the
chunked kernels' chunks, key shift with heads and rotary, shared query/key init, shifted gate
biases, an active gate penalty with bounded theta.

- the training objective's gradient, two entries of every parameter leaf, against central
  differences in float64, from a carried state with pending tokens;
- the compiled training step against the eager one over four steps with AdamW updates in
  between, while the batch size and the chunk length change from step to step;
- `hecate train`'s loop (data order, carried memory, clipping, warmup + cosine schedule,
  AdamW with its weight-decay filter) against a loop written here in plain NumPy;
- a run stopped and resumed with the other kind of step (compiled / eager) against the
  uninterrupted run."""
import copy
import math

import numpy as np
import pytest

from models import model
from models.config import ModelConfig
from models.optim import AdamW, clip_by_global_norm, matrices_only
from models.train_step import TrainStep
from tape import (Active, Const, Duplicated, ReverseWithPrimal, autodiff, make_zero,
                  make_zero_, primal, tree_map)
from tape.pytree import flatten

from test_model import named_leaves
from test_model_options_redteam import entries_match_central_differences, params_of


def close(a, b, rtol, atol=1e-30):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape and np.isfinite(a).all() and np.isfinite(b).all()
    scale = np.max(np.abs(b)) if b.size else 0.0
    err = np.max(np.abs(a - b), initial=0.0)
    assert err <= rtol * scale + atol, (err, scale)


# name -> (ModelConfig fields, batch, tokens of the carried first chunk)
COMBOS = {
    # Titans, MAL, 2 heads, rotary, MLP, key shift, window 1, a batch of one, 7 tokens against
    # a period of 3; two blocks.
    "titans-MAL-h2-rotary-mlp-keyshift-window1-batch1": (
        dict(rule="titans", composition="MAL", heads=2, rotary=True, mlp=1, key_shift=True,
             window=1, seq_len=7, levels=2, periods=(1, 3), layers=2, d_model=8), 1, 4),
    # Hebbian, three levels of periods 1, 2, 5 over 6-token chunks, two blocks, d 4, batch 3,
    # the gate penalty active (margin 1).
    "hebbian-levels3-p125-layers2-d4-batch3-penalty": (
        dict(rule="hebbian", composition="MAG", levels=3, periods=(1, 2, 5), seq_len=6,
             window=3, layers=2, d_model=4, gate_penalty=0.3, gate_margin=1.0), 3, 3),
    # Delta, bounded theta, strong gate penalty, 4 heads, four levels, window = seq_len,
    # shared q/k init, shifted biases.
    "delta-bounded-penalty-h4-levels4-window-eq-seq": (
        dict(rule="delta", composition="MAG", bounded_theta=True, gate_penalty=0.5,
             gate_margin=1.0, heads=4, levels=4, periods=(1, 2, 3, 4), seq_len=9, window=9,
             d_model=8, shared_qk_init=True, alpha_bias_shift=-2.0, theta_bias_shift=3.0),
        2, 5),
    # Titans with eta_max 1 (DESIGN exactly), four levels, 17 tokens: the period-1 level runs
    # in the chunked kernel (chunks of 16, one token left over), batch of one.
    "titans-levels4-eta1-seq17-chunked-batch1": (
        dict(rule="titans", composition="MAG", levels=4, periods=(1, 2, 4, 8), eta_max=1.0,
             seq_len=17, window=5, d_model=4, gate_penalty=0.2, gate_margin=0.5), 1, 6),
    # Delta, MAL, one-token chunks (seq_len 1, window 1).
    "delta-MAL-seq1-window1": (
        dict(rule="delta", composition="MAL", levels=2, periods=(1, 2), seq_len=1, window=1,
             d_model=4), 2, 1),
    # SWA alone, MAL, window 1, rotary, 2 heads, MLP 3, batch 1.
    "levels0-window1-rotary-h2-mlp3-batch1": (
        dict(rule="delta", composition="MAL", levels=0, heads=2, rotary=True, mlp=3, window=1,
             seq_len=5, d_model=8), 1, 2),
    # Hebbian, MAL, 2 heads, rotary, key shift, 21 tokens (chunked kernel with 5 left over;
    # period 4 with 3 pending tokens carried in).
    "hebbian-MAL-h2-rotary-keyshift-seq21": (
        dict(rule="hebbian", composition="MAL", heads=2, rotary=True, key_shift=True,
             levels=2, periods=(1, 4), seq_len=21, window=6, d_model=8), 2, 3),
}


def cfg_of(fields, **kw) -> ModelConfig:
    base = dict(vocab=7, layers=1, dtype="float64")
    base.update(fields)
    base.update(kw)
    return ModelConfig(**base)


def carried_state(params, cfg, batch, length, seed=7):
    toks = np.random.default_rng(seed).integers(0, cfg.vocab, size=(batch, length + 1))
    _, st, _ = model.training_loss(params, toks, model.init_state(cfg, batch), cfg)
    return tree_map(primal, st)


@pytest.mark.parametrize("name", sorted(COMBOS))
def test_gradient_entries_match_central_differences(name):
    """Two random entries of every parameter leaf of the training objective (gate penalty
    included), from a carried state with pending tokens, against central differences."""
    fields, batch, first = COMBOS[name]
    cfg = cfg_of(fields)
    params = params_of(cfg)
    state = carried_state(params, cfg, batch, first)
    assert state.pos == first
    tokens = np.random.default_rng(3).integers(0, cfg.vocab, size=(batch, cfg.seq_len + 1))

    def objective(p):
        return float(primal(model.training_loss(p, tokens, state, cfg)[0]))

    value = objective(params)
    if cfg.gate_penalty and cfg.levels:
        ce = float(primal(model.training_loss(params, tokens, state, cfg)[2]))
        assert value > ce + 1e-6      # the penalty takes part
    _, entries = entries_match_central_differences(params, tokens, state, cfg, per_leaf=2)
    unused = {"delta": ("w_e", "b_e"), "hebbian": ("w_t", "b_t", "w_e", "b_e"), "titans": ()}
    nonzero = 0
    for leaf_name, got in entries:
        if leaf_name.rsplit(".", 1)[-1] in unused[cfg.rule] and ".memory." in leaf_name:
            assert got == 0.0, leaf_name
        nonzero += got != 0.0
    assert nonzero > len(named_leaves(params))     # not a vacuous agreement of zeros


def numpy_adamw(p, g, m, v, t, lr, wd, decays, b1=0.9, b2=0.999, eps=1e-8):
    """torch.optim.AdamW's update of one leaf, written out (returns new p, m, v)."""
    if decays:
        p = p * (1 - lr * wd)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    return p - lr * mhat / (np.sqrt(vhat) + eps), m, v


STEP_COMBOS = ["titans-MAL-h2-rotary-mlp-keyshift-window1-batch1",
               "hebbian-levels3-p125-layers2-d4-batch3-penalty",
               "delta-bounded-penalty-h4-levels4-window-eq-seq",
               "levels0-window1-rotary-h2-mlp3-batch1"]


@pytest.mark.parametrize("name", STEP_COMBOS)
def test_compiled_step_equals_eager_step_as_batch_and_chunk_length_change(name):
    """Four steps, each followed by clipping and AdamW: a full chunk of 2 streams from fresh
    memory, a shorter (partial) chunk of the same streams with the memory carried, a batch of
    one from fresh memory, then a full chunk of the 2 streams again with their memory carried.
    The compiled step gives the eager step's losses, state and updated parameters (1e-12)."""
    fields, _, _ = COMBOS[name]
    cfg = cfg_of(fields)
    base = params_of(cfg)
    params = {c: copy.deepcopy(base) for c in (False, True)}
    steps = {c: TrainStep(cfg, compiled=c) for c in params}
    opts = {c: AdamW(params[c], lr=3e-2, weight_decay=0.1) for c in params}
    grads = {c: make_zero(base) for c in params}
    carried = {c: model.init_state(cfg, 2) for c in params}
    rng = np.random.default_rng(0)
    short = max(1, cfg.seq_len // 2)
    plan = [(2, cfg.seq_len, "fresh"), (2, short, "carry"), (1, cfg.seq_len, "fresh1"),
            (2, cfg.seq_len, "carry")]
    for n, (batch, length, how) in enumerate(plan):
        tokens = rng.integers(0, cfg.vocab, size=(batch, length + 1))
        out = {}
        for c in params:
            state = model.init_state(cfg, batch) if how.startswith("fresh") else carried[c]
            if how == "fresh":
                carried[c] = state
            make_zero_(grads[c])
            out[c] = steps[c](params[c], grads[c], tokens.copy(), state)
            if batch == 2:
                carried[c] = out[c][2]
            clip_by_global_norm(grads[c], 0.5)
            opts[c].step(params[c], grads[c])
        for k in (0, 1):
            assert abs(out[True][k] - out[False][k]) <= 1e-12 * abs(out[False][k]), (n, k)
        assert out[True][2].pos == out[False][2].pos
        for a, b in zip(flatten(out[True][2].blocks)[0], flatten(out[False][2].blocks)[0]):
            close(a, b, 1e-12)
        for (_, a), (_, b) in zip(named_leaves(params[True]), named_leaves(params[False])):
            close(a, b, 1e-12)
    assert carried[True].pos == cfg.seq_len + short + cfg.seq_len


CORPUS = bytes(range(32, 127)) * 20 + b"def f(x):\n    return x + 1\n\nclass A:\n    pass\n" * 40


def test_training_loop_equals_a_plain_numpy_loop():
    """`train` for 4 steps (3 of warmup, then cosine decay; clipping active; weight decay
    0.1) ends at the parameters of a loop written here: the same batches, the memory carried,
    the eager gradient, the global-norm clip, the schedule and AdamW in plain NumPy, weight
    decay on the leaves with two or more axes only."""
    import tempfile
    from models.data import TextData
    from models.evaluation import load_run
    from models.train import TrainConfig, train
    # (window 2: with window 1 the attention's query and key gradients are zero up to
    # rounding, ~1e-18, which each computation rounds its own way)
    cfg = cfg_of(COMBOS["titans-MAL-h2-rotary-mlp-keyshift-window1-batch1"][0], vocab=256,
                 window=2)
    tcfg = TrainConfig(steps=4, batch_size=2, lr=2e-2, warmup=3, weight_decay=0.1, clip=0.3,
                       min_lr_ratio=0.2, eval_every=100, eval_batches=1, final_eval_batches=1,
                       ckpt_every=100, sample_bytes=0, seed=3)
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, tcfg, tmp, progress=False, out=None, corpus=CORPUS)
        _, _, trained, header, _ = load_run(tmp)
    assert header["step"] == 4

    params = model.init_params(cfg, tcfg.seed)
    names = [n for n, _ in named_leaves(params)]

    def decays(name, leaf):
        # Matrices decay; norms and biases do not. Whether a memory level's gate weights do is
        # the filter's own choice (see the xfail below), so it is taken from it.
        if name.rsplit(".", 1)[-1] in ("w_a", "w_t", "w_e"):
            return matrices_only(name, leaf)
        return leaf.ndim >= 2
    ps = [a.copy() for _, a in named_leaves(params)]
    ms = [np.zeros_like(a) for a in ps]
    vs = [np.zeros_like(a) for a in ps]
    data = TextData(CORPUS, tcfg.batch_size, cfg.seq_len, tcfg.seed, source="corpus")
    state = model.init_state(cfg, tcfg.batch_size)
    clipped = 0
    for t in range(tcfg.steps):
        tokens = data.next_batch()
        grads, box = make_zero(params), []

        def f(p, tk, state=state, box=box):
            value, new, _ = model.training_loss(p, tk, state, cfg)
            box.append(new)
            return value
        autodiff(ReverseWithPrimal, f, Active, Duplicated(params, grads), Const(tokens))
        state = tree_map(primal, box[-1])
        gs = [g for _, g in named_leaves(grads)]
        norm = math.sqrt(sum(float(np.sum(g * g)) for g in gs))
        if norm > tcfg.clip:
            gs = [g * (tcfg.clip / norm) for g in gs]
            clipped += 1
        if t < tcfg.warmup:
            lr = tcfg.lr * (t + 1) / tcfg.warmup
        else:
            progress = (t - tcfg.warmup) / (tcfg.steps - tcfg.warmup)
            lr = tcfg.lr * (tcfg.min_lr_ratio + (1 - tcfg.min_lr_ratio) * 0.5
                            * (1 + math.cos(math.pi * progress)))
        for i, a in enumerate(ps):
            ps[i], ms[i], vs[i] = numpy_adamw(a, gs[i], ms[i], vs[i], t + 1, lr,
                                              tcfg.weight_decay, decays(names[i], a))
        # the next step's gradient is taken at the updated parameters
        for (_, leaf), new in zip(named_leaves(params), ps):
            leaf[...] = new
    assert clipped >= 2
    got = dict(named_leaves(trained))
    assert sorted(got) == sorted(names)
    for n, want in zip(names, ps):
        close(got[n], want, 1e-12, 1e-15)


@pytest.mark.parametrize("first, then", [(True, False), (False, True)])
def test_resume_with_the_other_step_kind_equals_the_uninterrupted_run(first, then, tmp_path):
    """Stopped after 3 steps (levels of period 2, 3 and 5 mid-period, momentum carried) and
    resumed with the other kind of training step: the final parameters are those of the
    uninterrupted run to 1e-12, and the losses agree step by step."""
    from models.evaluation import load_run
    from models.train import TrainConfig, train
    cfg = cfg_of(dict(rule="titans", composition="MAL", heads=2, rotary=True, key_shift=True,
                      levels=4, periods=(1, 2, 3, 5), window=1, seq_len=4, d_model=4,
                      gate_margin=0.5, bounded_theta=True), vocab=256)
    tcfg = TrainConfig(steps=5, batch_size=1, lr=2e-2, warmup=2, clip=0.5, eval_every=100,
                       eval_batches=1, final_eval_batches=1, ckpt_every=100, sample_bytes=0)
    full = train(cfg, tcfg, tmp_path / "a", progress=False, out=None, corpus=CORPUS,
                 compile_step=first)
    a = train(cfg, tcfg, tmp_path / "b", progress=False, out=None, corpus=CORPUS,
              stop_after=3, compile_step=first)
    b = train(cfg, tcfg, tmp_path / "b", resume=True, progress=False, out=None, corpus=CORPUS,
              compile_step=then)
    for x, y in zip(a.losses + b.losses, full.losses):
        assert abs(x - y) <= 1e-12 * abs(y)
    assert len(a.losses + b.losses) == 5
    _, _, pa, _, _ = load_run(tmp_path / "a")
    _, _, pb, _, _ = load_run(tmp_path / "b")
    for (na, x), (nb, y) in zip(named_leaves(pb), named_leaves(pa)):
        assert na == nb
        close(x, y, 1e-12, 1e-15)


def test_weight_decay_treats_gate_weights_alike_for_any_head_count():
    decays = {}
    for heads in (1, 2):
        cfg = cfg_of(dict(heads=heads, levels=1, d_model=8, window=2, seq_len=4))
        opt = AdamW(model.init_params(cfg, 0), weight_decay=0.1)
        decays[heads] = {path: d for path, d in zip(opt.paths, opt.decays) if "memory" in path}
    assert decays[1] == decays[2]
