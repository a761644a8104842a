"""Int8 dynamic quantisation of an exported step (`onnxruntime.quantization.quantize_dynamic`).

Only the weight products are quantised: every MatMul whose right operand is a 2-D weight
initializer (attention and memory projections, output projections, the unembedding) and the
embedding Gather. The products with the recurrent state (``M k``, ``M q``, attention over the
ring buffers) stay float32: the memories and caches change at every token, and quantising them
would round the state the next token starts from, compounding over the stream.

The weights are stored as 8-bit *unsigned* integers with a zero point (QUInt8). With signed
weights (QInt8) the u8 x s8 products of ONNX Runtime's x86 kernels saturate 16-bit sums (its
documented AVX2 caveat): measured on a 16-wide model, native logits then differed from the
WebAssembly build's by 0.8, so Python and the browser would decode different text. With
QUInt8 they agree to 1e-6, at the same file size; on the default `hecate train` model the
validation loss rose by 0.0007 nats/token (QInt8: 0.0033).
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .step import ExportError

INSTALL_HINT = 'pip install -e ".[edge]"'


def weight_nodes(model: Any) -> list:
    """Names of the nodes that read a weight matrix: MatMuls with a 2-D initializer as their
    right operand, and the Gather from the embedding (not the Gathers from rotary's cos / sin
    tables: angles rounded to 8 bits would turn every cached key by the wrong amount)."""
    inits = {i.name: len(i.dims) for i in model.graph.initializer}
    names = []
    for node in model.graph.node:
        if node.op_type == "MatMul" and inits.get(node.input[1]) == 2:
            names.append(node.name)
        elif node.op_type == "Gather" and node.input[0] == "embed":
            names.append(node.name)
    return names


def quantize_int8(model: Any, out_path: str | Path) -> None:
    """Write the 8-bit dynamically quantised form of `model` (an `onnx.ModelProto`) to
    `out_path`: uint8 weights with a per-tensor scale and zero point, activations quantised on
    the fly (see the module docstring for why unsigned)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise ExportError(f"--quantize needs onnxruntime, which is not installed: "
                          f"{INSTALL_HINT}") from None
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "float.onnx"
        onnx.save(model, str(src))
        quantize_dynamic(str(src), str(out_path), weight_type=QuantType.QUInt8,
                         nodes_to_quantize=weight_nodes(model),
                         extra_options={"MatMulConstBOnly": True})
