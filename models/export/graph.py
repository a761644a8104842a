"""A small builder over `onnx.helper`: named nodes, float32 weights as initializers, shared
constants, and the numerically careful pieces every subgraph uses (RMS norm, L2 norm, a
softplus without cancellation).

Every method returns the name of the value it creates, so subgraphs read like the NumPy code
they mirror (`models.decode`):

>>> g = GraphBuilder()
>>> x = g.input("x", "float32", [1, 4])
>>> y = g.op("Mul", x, g.const_f32(2.0))
>>> g.output(y, "y", "float32", [1, 4])
>>> model = g.model("double")
>>> [n.op_type for n in model.graph.node]   # the Identity names the output
['Mul', 'Identity']
"""
from __future__ import annotations

import collections
from typing import Any, Sequence

import numpy as np

OPSET = 17          # the graph uses no operator newer than opset 17
IR_VERSION = 8      # the IR version of opset 17: read by every ONNX Runtime since 1.14

_DTYPES = {"float32": 1, "int64": 7, "bool": 9}   # onnx.TensorProto element types


class GraphBuilder:
    """Collects the nodes, initializers, inputs and outputs of one ONNX graph."""

    def __init__(self) -> None:
        import onnx  # the `edge` extra; imported here so models/ imports without it

        self._onnx = onnx
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.outputs: list = []
        self._used: collections.Counter = collections.Counter()
        self._consts: dict = {}

    def name(self, hint: str) -> str:
        """A value name not used before in this graph, built from `hint`."""
        self._used[hint] += 1
        n = self._used[hint]
        return hint if n == 1 else f"{hint}_{n}"

    def op(self, op_type: str, *inputs: str, hint: str | None = None, **attrs: Any) -> str:
        """Append one node with a single output; returns the output's name."""
        out = self.name(hint or op_type.lower())
        self.nodes.append(self._onnx.helper.make_node(op_type, list(inputs), [out],
                                                      name=f"n{len(self.nodes)}_{op_type}",
                                                      **attrs))
        return out

    def weight(self, name: str, array: Any) -> str:
        """A float32 initializer holding `array` (a model weight)."""
        value = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
        name = self.name(name)
        self.initializers.append(self._onnx.numpy_helper.from_array(value, name))
        return name

    def _const(self, value: np.ndarray, hint: str) -> str:
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self._consts:
            name = self.name(hint)
            self.initializers.append(self._onnx.numpy_helper.from_array(value, name))
            self._consts[key] = name
        return self._consts[key]

    def const_f32(self, value: Any) -> str:
        """A float32 constant (scalar or array), shared by every use of the same value."""
        return self._const(np.asarray(value, dtype=np.float32), "c_f32")

    def const_i64(self, value: Any) -> str:
        """An int64 constant (scalar or array): shapes, axes, indices."""
        return self._const(np.asarray(value, dtype=np.int64), "c_i64")

    def input(self, name: str, dtype: str, shape: Sequence[int]) -> str:
        """Declare a graph input."""
        self.inputs.append(self._onnx.helper.make_tensor_value_info(name, _DTYPES[dtype],
                                                                    list(shape)))
        self._used[name] += 1
        return name

    def output(self, value: str, name: str, dtype: str, shape: Sequence[int]) -> None:
        """Declare `value` as the graph output `name` (through an Identity when the names
        differ, so an output never aliases an input or another output by name)."""
        if value != name:
            self.nodes.append(self._onnx.helper.make_node("Identity", [value], [name],
                                                          name=f"n{len(self.nodes)}_out"))
        self.outputs.append(self._onnx.helper.make_tensor_value_info(name, _DTYPES[dtype],
                                                                     list(shape)))

    def model(self, graph_name: str, doc: str = "") -> Any:
        """The finished `onnx.ModelProto` (opset `OPSET`, IR version `IR_VERSION`)."""
        helper = self._onnx.helper
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs,
                                  initializer=self.initializers)
        model = helper.make_model(graph, producer_name="hecate",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        model.doc_string = doc
        return model

    # -- the numerics shared by the subgraphs ------------------------------------------------

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", x, self.const_i64(list(shape)))

    def slice_last(self, x: str, start: int, end: int) -> str:
        """``x[..., start:end]``."""
        return self.op("Slice", x, self.const_i64([start]), self.const_i64([end]),
                       self.const_i64([-1]))

    def matmul(self, x: str, w: str) -> str:
        return self.op("MatMul", x, w)

    def rms_norm(self, x: str, weight: str, eps: float = 1e-6) -> str:
        """``x * (1 / sqrt(mean(x^2) + eps)) * weight`` over the last axis (`ops.rms_norm`)."""
        ms = self.op("ReduceMean", self.op("Mul", x, x), axes=[-1], keepdims=1)
        rrms = self.op("Reciprocal", self.op("Sqrt", self.op("Add", ms, self.const_f32(eps))))
        return self.op("Mul", self.op("Mul", x, rrms), weight)

    def l2_normalise(self, x: str, eps: float) -> str:
        """``x / sqrt(sum(x^2) + eps)`` over the last axis (`models.decode._l2_normalise`)."""
        ss = self.op("ReduceSum", self.op("Mul", x, x), self.const_i64([-1]), keepdims=1)
        return self.op("Div", x, self.op("Sqrt", self.op("Add", ss, self.const_f32(eps))))

    def softplus(self, x: str) -> str:
        """``max(x, 0) + log1p(exp(-|x|))`` (`ops.softplus`). ONNX has no Log1p, and
        ``log(1 + u)`` loses all of ``u`` below float32's epsilon (the slow levels' inner
        learning rate starts near exp(-7.6)), so log1p is computed as
        ``log(w) * u / (w - 1)`` with ``w = 1 + u`` (exact to rounding; ``u`` when w == 1)."""
        u = self.op("Exp", self.op("Neg", self.op("Abs", x)))
        w = self.op("Add", u, self.const_f32(1.0))
        wm1 = self.op("Sub", w, self.const_f32(1.0))
        is_one = self.op("Equal", wm1, self.const_f32(0.0))
        safe = self.op("Where", is_one, self.const_f32(1.0), wm1)
        log1p = self.op("Where", is_one, u,
                        self.op("Div", self.op("Mul", self.op("Log", w), u), safe))
        return self.op("Add", self.op("Relu", x), log1p)
