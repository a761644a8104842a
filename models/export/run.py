"""`hecate export`: a run directory's last checkpoint as ``model.onnx`` plus its fresh state
``model.onnx.state.npz``; optionally int8-quantised, with the validation loss of the quantised
step against the float32 one.
"""
from __future__ import annotations

import dataclasses
import logging
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..data import RecallTask, make_data
from .quantize import INSTALL_HINT, quantize_int8
from .runtime import OnnxDecoder, save_state, state_path
from .step import ExportError, build_step_model, fresh_state

QUANTIZE_CHOICES = ("int8",)


@dataclasses.dataclass
class ExportReport:
    """What `export_run` wrote and measured (sizes in bytes, losses in nats/token)."""
    model_path: Path
    state_path: Path
    size: int                      # the file written to model_path
    float_size: int                # the float32 graph, quantised or not
    weights: int                   # parameters held as initializers
    quantize: Optional[str] = None
    val_bytes: int = 0
    val_loss_float: Optional[float] = None
    val_loss_quantized: Optional[float] = None

    def lines(self) -> list:
        """The report as printed by ``hecate export``."""
        out = [f"wrote {self.model_path} ({_size(self.size)}, {self.weights:,} weights"
               f"{', ' + self.quantize if self.quantize else ', float32'}) and its fresh state "
               f"{self.state_path}"]
        if self.quantize:
            out.append(f"{self.quantize}: {_size(self.size)} vs float32 {_size(self.float_size)} "
                       f"({self.size / self.float_size:.0%})")
        if self.val_loss_float is not None:
            delta = self.val_loss_quantized - self.val_loss_float
            out.append(f"validation loss over {self.val_bytes} bytes: float32 "
                       f"{self.val_loss_float:.4f}, {self.quantize} "
                       f"{self.val_loss_quantized:.4f} nats/token ({delta:+.4f})")
        return out


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.2f} MiB"


def require_onnx() -> None:
    """Raise `ExportError` with the install command when the `onnx` package is missing."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ExportError(f"the onnx package is not installed: {INSTALL_HINT}") from None


def validation_streams(cfg: Any, tcfg: Any, max_bytes: int) -> list:
    """Up to `max_bytes` tokens of the run's validation data, as streams decoded from a fresh
    state each: the start of the text validation split (`models.data.TextData`), or whole
    recall validation sequences."""
    data = make_data(tcfg.task, tcfg.batch_size, cfg.seq_len, tcfg.seed, tcfg.data,
                     pairs=tcfg.pairs)
    if not isinstance(data, RecallTask):
        return [np.asarray(data.val[:max_bytes])]
    streams, total = [], 0
    for chunk in data.val_batches(None):
        for row in chunk:
            if total + len(row) > max_bytes and streams:
                return streams
            streams.append(np.asarray(row))
            total += len(row)
    return streams


def streams_loss(decoder: OnnxDecoder, streams: list) -> float:
    """The token-weighted mean loss of `streams` (each from a fresh state)."""
    total = count = 0
    for s in streams:
        n = len(s) - 1
        total += decoder.stream_loss(s) * n
        count += n
    return total / count


def export_run(run_dir: str | Path, out: str | Path, quantize: Optional[str] = None,
               val_bytes: int = 4096) -> ExportReport:
    """Export `run_dir`'s last checkpoint to `out` (see the module docstring)."""
    require_onnx()
    import onnx

    from ..train import load_run
    if quantize not in (None,) + QUANTIZE_CHOICES:
        raise ExportError(f"--quantize must be one of {QUANTIZE_CHOICES}; got {quantize!r}")
    cfg, tcfg, params, _, _ = load_run(run_dir, "cpu")
    model = build_step_model(params, cfg)
    onnx.checker.check_model(model, full_check=True)
    out = Path(out)
    weights = sum(int(np.prod(i.dims)) for i in model.graph.initializer if i.data_type == 1)
    float_bytes = model.SerializeToString()
    report = ExportReport(model_path=out, state_path=state_path(out), size=0,
                          float_size=len(float_bytes), weights=weights, quantize=quantize)
    save_state(report.state_path, fresh_state(cfg))
    if quantize is None:
        out.write_bytes(float_bytes)
    else:
        quiet = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)   # quantize_dynamic's pre-processing tip
        try:
            with tempfile.TemporaryDirectory() as tmp:
                tmp_out = Path(tmp) / "int8.onnx"
                quantize_int8(model, tmp_out)
                out.write_bytes(tmp_out.read_bytes())
        finally:
            logging.getLogger().setLevel(quiet)
        streams = validation_streams(cfg, tcfg, val_bytes)
        report.val_bytes = sum(len(s) for s in streams)
        report.val_loss_float = streams_loss(OnnxDecoder(float_bytes, fresh_state(cfg)), streams)
        report.val_loss_quantized = streams_loss(OnnxDecoder(out), streams)
    report.size = out.stat().st_size
    return report
