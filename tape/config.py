"""What a rule is told about the call it serves: `RuleConfig` (EnzymeRules' `config`), and the
shared, cached configs the traces hand to rules."""
from __future__ import annotations

from .activities import Active, BatchDuplicated, Const, Duplicated


class RuleConfig:
    """What a rule is told about the call it serves (EnzymeRules' `config`).

    - ``active[i]``: whether argument i carries a derivative (PyTorch's ``needs_input_grad``).
      ``activity[i]`` says the same as an Enzyme annotation class: `Const`; `Active` in reverse
      mode (the reverse rule returns its cotangent); `Duplicated` in forward mode (it has a
      tangent), `BatchDuplicated` when ``width > 1``.
    - ``needs_primal`` / ``needs_shadow``: whether the caller uses the primal result / its
      derivative. The result of a call inside the differentiated function may feed later
      operations, so both are True there. They can be False only for the differentiated
      function itself when it is a primitive (``autodiff(Forward, rule, ...)`` needs no primal,
      a Const return no shadow; see `Trace.call_root`); the rule may then return None for it.
    - ``width``: the batch width W. Tangents and cotangents are then `Batched` values (W arrays
      on a leading axis that look like one array to NumPy calls). Rules registered with
      `custom_rule` are told the width of what they receive; built-in rules are written
      width-agnostic and always see 1.
    - ``overwritten[i]``: whether argument i's memory may be written between this call and
      the reverse rule, so that the rule must copy it rather than keep a reference. Values of
      this level never are (the engine copies on write), so this is ``not active[i]`` unless
      refined: rules registered with `custom_rule` get False for immutable arguments too
      (numbers, read-only arrays, tuples of them).
    - ``mode``: "reverse" or "forward".

    Configs are immutable and shared: `config_for` builds them, `replace` changes fields.
    """

    __slots__ = ("active", "needs_primal", "needs_shadow", "width", "overwritten", "mode",
                 "activity")

    def __init__(self, active: tuple, needs_primal: bool = True, width: int = 1,
                 overwritten: tuple | None = None, *, needs_shadow: bool = True,
                 mode: str = "reverse"):
        if mode not in ("reverse", "forward"):
            raise ValueError(f"mode must be 'reverse' or 'forward', got {mode!r}")
        self.active = tuple(active)
        self.needs_primal = needs_primal
        self.needs_shadow = needs_shadow
        self.width = width
        self.overwritten = (tuple(overwritten) if overwritten is not None
                            else tuple(not a for a in self.active))
        if len(self.overwritten) != len(self.active):
            raise ValueError(f"overwritten has {len(self.overwritten)} entries for "
                             f"{len(self.active)} arguments")
        self.mode = mode
        shadow = (Active if mode == "reverse" else Duplicated if width == 1
                  else BatchDuplicated)
        self.activity = tuple(shadow if a else Const for a in self.active)

    def replace(self, **changes) -> "RuleConfig":
        """This config with some fields changed (a shared, cached object too).

        >>> config_for((True, False)).replace(needs_primal=False).needs_primal
        False
        """
        active = changes.pop("active", self.active)
        fields = {"needs_primal": self.needs_primal, "width": self.width,
                  "overwritten": self.overwritten, "needs_shadow": self.needs_shadow,
                  "mode": self.mode}
        fields.update(changes)
        return config_for(active, **fields)

    def __repr__(self) -> str:
        return (f"RuleConfig(active={self.active}, needs_primal={self.needs_primal}, "
                f"needs_shadow={self.needs_shadow}, width={self.width}, "
                f"overwritten={self.overwritten}, mode={self.mode!r})")


class _ConfigTable(dict):
    """RuleConfigs by activity pattern, for one setting of the other fields.

    (Speed-up: a dict whose misses build the config, so a trace finds a record's config with
    one lookup and all records of one pattern share it.)"""

    __slots__ = ("settings",)

    def __init__(self, settings: dict):
        super().__init__()
        self.settings = settings

    def __missing__(self, active):
        cfg = self[active] = RuleConfig(active, **self.settings)
        return cfg


_TABLES: dict = {}


def config_table(needs_primal: bool = True, width: int = 1, *, needs_shadow: bool = True,
                 mode: str = "reverse") -> _ConfigTable:
    """The shared table of configs with these settings, indexed by activity pattern."""
    key = (needs_primal, width, needs_shadow, mode)
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES[key] = _ConfigTable(
            {"needs_primal": needs_primal, "width": width, "needs_shadow": needs_shadow,
             "mode": mode})
    return table


_REVERSE_CONFIGS = config_table()
_FORWARD_CONFIGS = config_table(mode="forward")
_REFINED: dict = {}


def config_for(active: tuple, needs_primal: bool = True, width: int = 1,
               overwritten: tuple | None = None, *, needs_shadow: bool = True,
               mode: str = "reverse") -> RuleConfig:
    """The shared config of a call with these settings (built once, then cached).

    >>> config_for((True, False)).activity
    (<class 'tape.activities.Active'>, <class 'tape.activities.Const'>)
    """
    active = tuple(active)
    if needs_primal and width == 1 and overwritten is None and needs_shadow:
        # speed-up: the settings of every call inside a differentiated function
        return (_REVERSE_CONFIGS if mode == "reverse" else _FORWARD_CONFIGS)[active]
    table = config_table(needs_primal, width, needs_shadow=needs_shadow, mode=mode)
    if overwritten is None:
        return table[active]
    overwritten = tuple(bool(o) for o in overwritten)
    key = (active, overwritten, needs_primal, width, needs_shadow, mode)
    cfg = _REFINED.get(key)
    if cfg is None:
        base = table[active]
        cfg = base if base.overwritten == overwritten else RuleConfig(
            active, needs_primal, width, overwritten, needs_shadow=needs_shadow, mode=mode)
        _REFINED[key] = cfg
    return cfg


_ACTIVE_1 = config_for((True,))
_ACTIVE_11 = config_for((True, True))
_ACTIVE_10 = config_for((True, False))
_ACTIVE_01 = config_for((False, True))
