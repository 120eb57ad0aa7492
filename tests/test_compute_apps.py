"""The Pollux apps through one entry point: the graph model or the kernel model, per app."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from workbench.compute import BUILTIN_DEVICES, load_coefficients, load_graph
from workbench.compute.apps import (
    AppChoice,
    AppKernelError,
    KernelPath,
    app_step_graph,
    chosen_predictor,
    kernel_compute_s,
    kernel_unrepresentable,
    predict_app_step,
    read_app_predictors,
)
from workbench.compute.predict import predict_step
from workbench.perf import overlap_time

T4 = BUILTIN_DEVICES["T4"]
APPS = ("cifar10", "imagenet", "bert", "yolov3", "ncf")


@pytest.mark.parametrize("app", APPS)
def test_app_kernels_carry_the_graphs_flops(app: str) -> None:
    """The kernel graph runs every GEMM and convolution of the app's graph: forward FLOPs
    equal the graph's at the batch, backward twice that less the first layer's input
    gradient."""
    g = load_graph(app)
    b = 4
    sg = app_step_graph(g, b)
    heavy = ("conv", "linear", "bmm")
    fwd = sum(k.flops * k.count for k in sg.kernels if k.phase == "forward" and k.kind in heavy)
    want = b * sum(op.flops_per_sample for op in g.ops if op.kind in ("conv", "gemm"))
    assert fwd == pytest.approx(want, rel=1e-9)
    bwd = sum(k.flops * k.count for k in sg.kernels if k.phase == "backward" and k.kind in heavy)
    first = b * g.ops[0].flops_per_sample if g.ops[0].kind in ("conv", "gemm") else 0.0
    assert bwd == pytest.approx(2 * want - first, rel=1e-9)
    upd = [k for k in sg.kernels if k.phase == "optimizer"]
    assert sum(k.dims[0] * k.count for k in upd) == pytest.approx(g.param_bytes / 4, rel=1e-3)


def test_deepspeech2_stays_on_the_graph_model_with_its_reason() -> None:
    g = load_graph("deepspeech2")
    why = kernel_unrepresentable(g)
    assert why is not None and "recurrent" in why
    with pytest.raises(AppKernelError, match="recurrent"):
        app_step_graph(g, 8)
    forced = {"deepspeech2": AppChoice("deepspeech2", "kernel")}
    assert chosen_predictor(g, forced) == "graph"
    shipped = read_app_predictors()
    assert shipped["deepspeech2"].predictor == "graph"
    assert "cannot represent" in shipped["deepspeech2"].reason


def test_one_entry_point_gives_both_kinds_of_job() -> None:
    """``predict_app_step`` is the graph model's ``predict_step`` where the table says
    graph, and the kernel path (its compute, the same sync and overlap) where it says
    kernel; ``predictor`` forces either."""
    g = load_graph("cifar10")
    coef = load_coefficients()
    kp = KernelPath.shipped()
    graph_tab = {"cifar10": AppChoice("cifar10", "graph")}
    kernel_tab = {"cifar10": AppChoice("cifar10", "kernel")}
    for n, nodes in ((1, 1), (4, 1), (8, 2)):
        old = predict_step(g, T4, n, 64, coef, nodes=nodes)
        assert predict_app_step(g, T4, n, 64, coef, nodes=nodes, choices=graph_tab) == old
        assert predict_app_step(g, T4, n, 64, coef, nodes=nodes, predictor="graph",
                                choices=kernel_tab) == old
        new = predict_app_step(g, T4, n, 64, coef, nodes=nodes, choices=kernel_tab,
                               kernel_path=kp)
        assert new.compute_s == pytest.approx(kernel_compute_s(g, T4, 64, kp.model, kp.terms))
        assert new.compute_s != pytest.approx(old.compute_s, rel=1e-3)
        assert new.sync_s == pytest.approx(old.sync_s)  # the same all-reduce
        assert new.step_time_s == pytest.approx(float(overlap_time(
            new.compute_s, new.sync_s, coef.sync.gamma)))
        assert new.step_time_lo_s < new.step_time_s < new.step_time_hi_s
    with pytest.raises(ValueError, match="predictor"):
        predict_app_step(g, T4, 1, 64, coef, predictor="neusight")
    with pytest.raises(ValueError, match="FP32"):
        predict_app_step(g, T4, 1, 64, coef, predictor="kernel", precision="fp16")
    # another precision than FP32 takes the graph model whatever the table says
    assert predict_app_step(g, T4, 1, 64, coef, choices=kernel_tab, precision="fp16") == \
        predict_step(g, T4, 1, 64, coef, precision="fp16")


def test_kernel_path_is_fast_and_slower_with_more_work() -> None:
    g = load_graph("yolov3")
    coef = load_coefficients()
    t0 = time.perf_counter()
    small = predict_app_step(g, T4, 1, 2, coef, predictor="kernel")
    assert time.perf_counter() - t0 < 1.0  # predict stays under 1 s (model read included)
    big = predict_app_step(g, T4, 1, 16, coef, predictor="kernel")
    h800 = predict_app_step(g, BUILTIN_DEVICES["H800"], 1, 16, coef, predictor="kernel")
    assert 0 < small.step_time_s < big.step_time_s and h800.step_time_s < big.step_time_s


def test_shipped_profiles_name_the_table_s_predictor() -> None:
    from workbench.perf import load_default_profiles

    table = read_app_predictors()
    assert set(table) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    for p in load_default_profiles():
        if p.gpu_type == "T4":
            continue  # measured, not predicted
        kernel = table[p.app].predictor == "kernel"
        assert ("by the kernel-level model" in p.source) == kernel, (p.app, p.source)


@pytest.mark.slow
def test_the_choice_is_the_held_out_comparison(shared_data: Path) -> None:
    """Both predictors leave one device out on the apps' measured steps (Zeus, Pollux):
    each app's predictor in the shipped table is the one :func:`choose` picks from them,
    and the kernel model is chosen only where its held-out 1-GPU median error is lower."""
    from workbench.compute.app_train import CONFIGS, choose, errors, held_out_predictions
    from workbench.compute.train import load_graphs

    pred = held_out_predictions(shared_data / "profiles")
    graphs = load_graphs(sorted(pred["app"].unique()))
    picked = choose(pred, graphs)
    shipped = read_app_predictors()
    assert {a: c.predictor for a, c in picked.items()} == \
        {a: c.predictor for a, c in shipped.items()}
    e = errors(pred, ["app", "config"]).set_index(["app", "config"])
    for app, c in picked.items():
        one = e.loc[(app, CONFIGS[0])]
        if c.predictor == "kernel":
            assert one["kernel_median"] < one["graph_median"]
            assert c.errors[f"{CONFIGS[0]}: kernel_median"] == \
                pytest.approx(shipped[app].errors[f"{CONFIGS[0]}: kernel_median"], abs=0.02)
        elif kernel_unrepresentable(graphs[app]) is None:
            multi = e.loc[(app, CONFIGS[1])] if (app, CONFIGS[1]) in e.index else None
            assert (one["kernel_median"] >= one["graph_median"]
                    or (multi is not None and multi["kernel_median"] > multi["graph_median"]))


def test_kernel_shapes_survive_json_and_graphs_without_them_stay_as_before() -> None:
    from workbench.compute.graph import GraphError, Op, graph_from_dict, graph_to_dict

    g = load_graph("yolov3")
    assert graph_from_dict(graph_to_dict(g)) == g
    assert all(op.dims for op in g.ops)
    bare = Op("x", "gemm", 2.0, 8.0)
    assert "dims" not in graph_to_dict(g.__class__("bare", (bare,)))["ops"][0]
    with pytest.raises(GraphError, match="dims"):
        Op("y", "conv", 1.0, 1.0, dims=(3, -1))
    with pytest.raises(AppKernelError, match="no kernel shapes"):
        app_step_graph(g.__class__("bare", (bare,)), 1)


def test_an_app_and_a_model_config_meet_in_the_same_kernel_model() -> None:
    """The Pollux BERT app through the kernel path and BERT-base from its config through the
    transformer path (the LLM jobs') run the same GEMMs and come within 5 % of each other:
    one kernel-level predictor serves both kinds of job."""
    from workbench.compute.opgraph import build_step_graph
    from workbench.compute.step import kernel_times
    from workbench.compute.transformer import model_spec

    cfg = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
           "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522,
           "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu"}
    llm = build_step_graph(model_spec(cfg, "bert-base"), "train", 384, 8,
                           head="classification")
    app = app_step_graph(load_graph("bert"), 8)
    for phase in ("forward", "backward"):
        for kind in ("linear", "bmm"):
            assert app.flops(phase, kind) == pytest.approx(llm.flops(phase, kind), rel=1e-6)
    kp = KernelPath.shipped()
    for dev in ("T4", "V100", "A100"):
        d = BUILTIN_DEVICES[dev]
        t_app = kernel_compute_s(load_graph("bert"), d, 8, kp.model, kp.terms)
        times = kernel_times(llm, d, kp.model)
        t_llm = sum(times.phase_s(kp.terms, p) for p in ("forward", "backward", "optimizer"))
        assert t_app == pytest.approx(t_llm, rel=0.05), dev
