"""A tiny ONNX model built with onnx.helper, shared by the graph and CLI tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_onnx(path: Path, batch: int | str = 4) -> Path:
    """x[N,3,8,8] -> Conv(16, 3x3, pad 1) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(10)."""
    w = numpy_helper.from_array(np.ones((16, 3, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.zeros(16, np.float32), "b")
    w2 = numpy_helper.from_array(np.ones((16, 10), np.float32), "w2")
    b2 = numpy_helper.from_array(np.zeros(10, np.float32), "b2")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], name="fc"),
    ]
    g = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        initializer=[w, b, w2, b2])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return path
