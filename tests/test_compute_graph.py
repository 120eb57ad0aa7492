"""Computation graphs: the format, the shipped app graphs and the ONNX loader."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_onnx import tiny_onnx as _tiny_onnx
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.compute.graph import (
    Graph,
    GraphError,
    Op,
    app_graph_names,
    graph_from_dict,
    graph_to_dict,
    load_graph,
    write_graph,
)


def test_onnx_loader_counts_flops_bytes_params_and_edges(tmp_path: Path) -> None:
    g = load_graph(_tiny_onnx(tmp_path / "tiny.onnx"))
    assert g.name == "tiny" and g.reference_batch == 4
    ops = {o.name: o for o in g.ops}
    assert [o.name for o in g.ops] == ["conv", "relu", "pool", "fc"]  # Flatten costs nothing
    assert ops["conv"].kind == "conv" and ops["fc"].kind == "gemm"
    assert ops["relu"].kind == "elementwise" and ops["pool"].kind == "pool"
    # conv: 2 * (16*8*8 outputs) * (3*3*3 per output) per sample; fc: 2 * 10 * 16
    assert ops["conv"].flops_per_sample == pytest.approx(2 * 16 * 64 * 27)
    assert ops["fc"].flops_per_sample == pytest.approx(2 * 10 * 16)
    assert ops["conv"].param_bytes == 4 * (16 * 27 + 16)
    assert ops["fc"].param_bytes == 4 * (160 + 10)
    # input 3x8x8 + output 16x8x8 floats per sample
    assert ops["conv"].act_bytes_per_sample == pytest.approx(4 * (3 * 64 + 16 * 64))
    assert ops["relu"].inputs == ("conv",) and ops["fc"].inputs == ("pool",)
    assert g.param_bytes == 4 * (16 * 27 + 16 + 170)


def test_onnx_symbolic_batch_is_per_sample(tmp_path: Path) -> None:
    fixed = load_graph(_tiny_onnx(tmp_path / "a.onnx", 4))
    sym = load_graph(_tiny_onnx(tmp_path / "b.onnx", "N"))
    assert sym.reference_batch == 1
    assert sym.totals(4)["flops"] == pytest.approx(fixed.totals(4)["flops"])


def test_onnx_bad_file_is_a_graph_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(GraphError, match="not a readable ONNX"):
        load_graph(bad)
    with pytest.raises(GraphError, match="not found"):
        load_graph(tmp_path / "missing.onnx")


def test_shipped_graphs_cover_the_six_apps() -> None:
    names = set(app_graph_names())
    assert {"cifar10", "imagenet", "bert", "deepspeech2", "yolov3", "ncf"} <= names
    for n in names:
        g = load_graph(n)
        assert g.name == n and g.meta["app"] in {"cifar10", "imagenet", "bert", "deepspeech2",
                                                 "yolov3", "ncf"}


@pytest.mark.parametrize(("app", "gflops", "mparams"), [
    ("imagenet", 8.2, 25.6),  # ResNet-50: 4.1 GMACs, 25.6 M parameters
    ("cifar10", 1.11, 11.2),  # ResNet-18 (CIFAR): 0.56 GMACs, 11.2 M
    ("bert", None, 110.0),  # BERT-base: 110 M
    ("yolov3", 65.9, 62.0),  # YOLOv3-416: 65.9 BFLOPs (darknet), ~62 M
])
def test_stored_graphs_match_published_sizes(app: str, gflops: float | None,
                                             mparams: float) -> None:
    g = load_graph(app)
    t = g.totals(1)
    if gflops is not None:
        assert t["flops"] / 1e9 == pytest.approx(gflops, rel=0.03)
    assert g.param_bytes / 4e6 == pytest.approx(mparams, rel=0.03)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 4096), app=st.sampled_from(["imagenet", "bert", "ncf"]))
def test_graph_costs_scale_with_batch(b: int, app: str) -> None:
    g = load_graph(app)
    one, many = g.totals(1), g.totals(b)
    assert many["flops"] == pytest.approx(b * one["flops"])
    act = one["bytes"] - g.param_bytes
    assert many["bytes"] == pytest.approx(b * act + g.param_bytes)
    assert many["param_bytes"] == one["param_bytes"]


def test_graph_json_round_trip(tmp_path: Path) -> None:
    g = load_graph("cifar10")
    assert graph_from_dict(graph_to_dict(g)) == g
    write_graph(g, tmp_path / "g.json")
    assert load_graph(tmp_path / "g.json") == g


def test_graph_validation_says_what_is_wrong() -> None:
    op = Op("a", "conv", 1.0, 1.0)
    with pytest.raises(GraphError, match="duplicate op name"):
        Graph("g", (op, op))
    with pytest.raises(GraphError, match="topological"):
        Graph("g", (Op("b", "gemm", 1.0, 1.0, inputs=("a",)), op))
    with pytest.raises(GraphError, match="kind"):
        Op("x", "magic", 1.0, 1.0)
    with pytest.raises(GraphError, match=">= 0"):
        Op("x", "gemm", -1.0, 1.0)
    with pytest.raises(GraphError, match="known: .*imagenet"):
        load_graph("no-such-app")
    with pytest.raises(GraphError, match="schema_version"):
        graph_from_dict({"name": "x", "ops": []})
