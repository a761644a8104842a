"""`hecate export`: the model's incremental decode step (`models.decode.step`, batch 1) as one
ONNX graph, built with the `onnx` package's own helper API (no tracing), for ONNX Runtime in
Python, under Node and in a browser (WebAssembly; see edge/ and docs/edge.md).

- `graph`: the node builder and the shared numerics (RMS norm, L2 norm, softplus);
- `blocks`: the memory-level, attention and block subgraphs;
- `step`: the whole step, its state tensors, and what cannot be exported (`ExportError`);
- `runtime`: running a step with onnxruntime (greedy decoding, the loss of a stream);
- `quantize`: int8 dynamic quantisation of the weight products;
- `run`: exporting a run directory; `cli`: the ``hecate export`` subcommand.

The `onnx` package (extra ``edge``) is imported only when a graph is built, so the rest of
`models` works without it.
"""
from .run import ExportReport, export_run
from .runtime import OnnxDecoder, load_state, save_state, state_path
from .step import ExportError, StateSpec, build_step_model, check_exportable, fresh_state, state_specs

__all__ = ["ExportReport", "export_run", "OnnxDecoder", "load_state", "save_state", "state_path",
           "ExportError", "StateSpec", "build_step_model", "check_exportable", "fresh_state",
           "state_specs"]
