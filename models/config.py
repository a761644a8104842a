"""The model's configuration: one frozen dataclass, validated, with a JSON round trip.

>>> cfg = ModelConfig(d_model=32, layers=1, window=8, seq_len=16)
>>> cfg.validate()
>>> ModelConfig.from_dict(cfg.to_dict()) == cfg
True
>>> ModelConfig(window=64, seq_len=32).validate()
Traceback (most recent call last):
    ...
ValueError: ModelConfig.seq_len (32) must be >= window (64)
"""
from __future__ import annotations

import dataclasses
from typing import Any

RULES = ("delta", "titans", "hebbian")
COMPOSITIONS = ("MAG", "MAL")
DTYPES = ("float32", "float64")
DEFAULT_PERIODS = (1, 8, 64, 512)
# The value of each field that was added after checkpoints existed, as it behaved before the
# field existed. `ModelConfig.from_dict` fills a missing field from here (not from the current
# default), so an older run's config.json or checkpoint header loads as the model it trained.
PREDATING = {"heads": 1, "mlp": 0, "rotary": False, "bounded_theta": False}
# The backbone that measured best at `hecate train`'s budget (docs/model.md, ablation table):
# 4 heads, an MLP of 2 d, rotary attention, a bounded inner learning rate. `hecate train`'s
# text task starts from it (`train_defaults`); the class defaults stay DESIGN §5's model, which
# library code and the recall task (1 head, no MLP, no rotary: it solves recall) build on.
TEXT_MODEL = {"heads": 4, "mlp": 2, "rotary": True, "bounded_theta": True}


def train_defaults(task: str | None = "text") -> dict:
    """The model fields `hecate train` starts from for `task` (before the recall task's own
    `models.train.RECALL_MODEL` and the flags): `ModelConfig`'s defaults, with `TEXT_MODEL`
    over them for the text task.

    >>> train_defaults()["heads"], train_defaults("recall")["heads"]
    (4, 1)
    """
    base = ModelConfig().to_dict()
    return base if task == "recall" else {**base, **TEXT_MODEL}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and choices of the Nested-Learning model (see `models.model`).

    ``levels`` CMS levels are used, with periods ``periods[:levels]``: level i updates its memory
    once every ``periods[i]`` tokens. ``levels=0`` removes the memory branch: each block is then
    plain sliding-window attention (the SWA-only baseline of the recall comparison).
    """
    vocab: int = 256            # byte-level
    d_model: int = 64
    layers: int = 2
    window: int = 32            # sliding-window attention
    seq_len: int = 128          # tokens per training chunk
    levels: int = 2             # CMS levels, periods[:levels]; 0 = SWA only, no memory
    periods: tuple = DEFAULT_PERIODS
    rule: str = "delta"         # "delta" | "titans" | "hebbian"
    composition: str = "MAG"    # "MAG" | "MAL"
    dtype: str = "float32"
    # Added to the DESIGN §5 initial gate biases of every level (0 = the table as is). The
    # recall task uses them: its keys must survive ~50 tokens of filler (retention) and be
    # written strongly enough to be read back (inner learning rate); see `RECALL_MODEL`.
    alpha_bias_shift: float = 0.0
    theta_bias_shift: float = 0.0
    # Memory keys from the previous token (`models.layers._projections`); off for DESIGN §5.
    key_shift: bool = False
    # The memory's query projection starts equal to its key projection (`init_level`), so a
    # query reads what was written under the same token from the first step; off for DESIGN §5.
    shared_qk_init: bool = False
    # Training adds gate_penalty * mean(relu(|z| - gate_margin)^2) over the sigmoid gates'
    # pre-activations, keeping them out of saturation (`models.layers.gate_excess`); 0 = off.
    gate_penalty: float = 0.01
    gate_margin: float = 5.0
    # Titans' momentum is eta_max * sigmoid(.) (`models.layers`); 1.0 is DESIGN §5 exactly.
    eta_max: float = 0.9
    # Attention heads, and memory heads: each CMS level keeps one [d/heads, d/heads] memory
    # per head with its own gates (`models.layers`). 1 = DESIGN §5 (one [d, d] memory).
    heads: int = 1
    # Each block adds a pre-norm SiLU MLP sublayer of mlp * d_model hidden units; 0 = none.
    mlp: int = 0
    # Rotary positions on the attention queries and keys of every head (`models.model`).
    rotary: bool = False
    # The inner learning rate is sigmoid(z) in (0, 1) (DeltaNet's beta) instead of softplus(z):
    # the delta rule with unit keys diverges once theta > 2 (`models.layers`). The same value
    # at the initial biases (both ~exp(z) there). False = DESIGN §5.
    bounded_theta: bool = False

    def __post_init__(self) -> None:
        # JSON turns tuples into lists; keep the frozen dataclass hashable and comparable.
        if isinstance(self.periods, list):
            object.__setattr__(self, "periods", tuple(self.periods))

    def validate(self) -> None:
        """Raise a ValueError naming the offending field; return None when the config is usable.

        >>> ModelConfig(rule="lstm").validate()
        Traceback (most recent call last):
            ...
        ValueError: ModelConfig.rule must be one of ('delta', 'titans', 'hebbian'); got 'lstm'
        """
        for name in ("vocab", "d_model", "layers", "window", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int; got {value!r}")
        if isinstance(self.levels, bool) or not isinstance(self.levels, int) or self.levels < 0:
            raise ValueError(f"ModelConfig.levels must be an int >= 0 (0: no memory branch); "
                             f"got {self.levels!r}")
        if self.vocab < 2:
            raise ValueError(f"ModelConfig.vocab must be >= 2; got {self.vocab}")
        if self.seq_len < self.window:
            raise ValueError(f"ModelConfig.seq_len ({self.seq_len}) must be >= window "
                             f"({self.window})")
        periods = self.periods
        if (not isinstance(periods, tuple) or not periods
                or any(isinstance(p, bool) or not isinstance(p, int) or p < 1 for p in periods)):
            raise ValueError(f"ModelConfig.periods must be a non-empty tuple of positive ints; "
                             f"got {periods!r}")
        if list(periods) != sorted(set(periods)):
            raise ValueError(f"ModelConfig.periods must be strictly increasing; got {periods!r}")
        if periods[0] != 1:
            raise ValueError(f"ModelConfig.periods must start with 1 (the per-token level); "
                             f"got {periods!r}")
        if self.levels > len(periods):
            raise ValueError(f"ModelConfig.levels must be between 0 and {len(periods)} "
                             f"(len(periods)); got {self.levels}")
        if self.levels > 4:
            raise ValueError(f"ModelConfig.levels must be between 0 and 4 (DESIGN §5 gives gate "
                             f"biases for four levels); got {self.levels}")
        if self.rule not in RULES:
            raise ValueError(f"ModelConfig.rule must be one of {RULES}; got {self.rule!r}")
        if self.composition not in COMPOSITIONS:
            raise ValueError(f"ModelConfig.composition must be one of {COMPOSITIONS}; "
                             f"got {self.composition!r}")
        for name in ("alpha_bias_shift", "theta_bias_shift"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not abs(value) < 20):
                raise ValueError(f"ModelConfig.{name} must be a finite number in (-20, 20); "
                                 f"got {value!r}")
        for name in ("gate_penalty", "gate_margin"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not 0 <= value < float("inf")):
                raise ValueError(f"ModelConfig.{name} must be a finite number >= 0; "
                                 f"got {value!r}")
        value = self.eta_max
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ValueError(f"ModelConfig.eta_max must be a number in (0, 1]; got {value!r}")
        if isinstance(self.heads, bool) or not isinstance(self.heads, int) or self.heads < 1:
            raise ValueError(f"ModelConfig.heads must be a positive int; got {self.heads!r}")
        if self.d_model % self.heads:
            raise ValueError(f"ModelConfig.heads ({self.heads}) must divide d_model "
                             f"({self.d_model})")
        if isinstance(self.mlp, bool) or not isinstance(self.mlp, int) or not 0 <= self.mlp <= 16:
            raise ValueError(f"ModelConfig.mlp must be an int from 0 (no MLP) to 16 (hidden "
                             f"units per d_model); got {self.mlp!r}")
        if self.rotary is True and (self.d_model // self.heads) % 2:
            raise ValueError(f"ModelConfig.rotary needs an even head width d_model / heads; "
                             f"got {self.d_model} / {self.heads}")
        for name in ("key_shift", "shared_qk_init", "rotary", "bounded_theta"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ModelConfig.{name} must be a bool; "
                                 f"got {getattr(self, name)!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"ModelConfig.dtype must be one of {DTYPES}; got {self.dtype!r}")

    @property
    def head_dim(self) -> int:
        """The width of one attention / memory head: ``d_model // heads``.

        >>> ModelConfig(d_model=64, heads=4).head_dim
        16
        """
        return self.d_model // self.heads

    @property
    def level_periods(self) -> tuple:
        """The periods of the levels in use: ``periods[:levels]``.

        >>> ModelConfig(levels=3).level_periods
        (1, 8, 64)
        """
        return tuple(self.periods[:self.levels])

    def to_dict(self) -> dict:
        """A JSON-ready dict (periods as a list).

        >>> ModelConfig().to_dict()["periods"]
        [1, 8, 64, 512]
        """
        d = dataclasses.asdict(self)
        d["periods"] = list(self.periods)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """Inverse of `to_dict`; unknown keys are an error naming them. Missing keys take their
        defaults, except the fields of `PREDATING` (added after checkpoints existed), which take
        the value that reproduces the older model. The result is validated.

        >>> ModelConfig.from_dict({"d_model": 16}).heads    # a config that predates heads
        1

        >>> ModelConfig.from_dict({"d_model": 16, "colour": "red"})
        Traceback (most recent call last):
            ...
        ValueError: ModelConfig.from_dict: unknown key(s) ['colour']
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"ModelConfig.from_dict: unknown key(s) {unknown}")
        kwargs = {**PREDATING, **d}
        if "periods" in kwargs and isinstance(kwargs["periods"], list):
            kwargs["periods"] = tuple(kwargs["periods"])
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg
