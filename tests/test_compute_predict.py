"""The predictor: roofline, graph aggregation, ring all-reduce, interval, calibration."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.compute.devices import BUILTIN_DEVICES
from workbench.compute.graph import OPTIMIZER_STATE_COPIES, Graph, Op, load_graph
from workbench.compute.predict import (
    ROOFLINE_ONLY,
    SyncModel,
    coefficients_from_dict,
    coefficients_to_dict,
    compute_time_s,
    interval_factors,
    load_coefficients,
    predict_grid,
    predict_step,
    roofline_time_s,
    sync_time_s,
)

T4 = BUILTIN_DEVICES["T4"]


@pytest.mark.parametrize(("flops", "bytes_", "expected_s"), [
    (8.1e12, 0.0, 1.0),  # compute-bound: T4 FP32 peak 8.1 TF
    (0.0, 320e9, 1.0),  # memory-bound: 320 GB/s
    (8.1e12, 32e9, 1.0),  # compute dominates
    (8.1e11, 320e9, 1.0),  # memory dominates
])
def test_roofline_is_the_slower_of_compute_and_memory(flops: float, bytes_: float,
                                                      expected_s: float) -> None:
    assert roofline_time_s(flops, bytes_, T4) == pytest.approx(expected_s)


def test_roofline_precision_uses_the_tensor_peak() -> None:
    a100 = BUILTIN_DEVICES["A100"]
    assert roofline_time_s(312e12, 0.0, a100, "fp16") == pytest.approx(1.0)
    assert roofline_time_s(156e12, 0.0, a100, "tf32") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="precision"):
        roofline_time_s(1.0, 1.0, a100, "int4")


def test_roofline_only_aggregation_by_hand() -> None:
    g = Graph("two", (Op("mm", "gemm", 2e9, 8e6, param_bytes=4e6),
                      Op("relu", "elementwise", 1e6, 8e6, inputs=("mm",))))
    b = 8
    mm = max(3 * 2e9 * b / 8.1e12, 3 * (8e6 * b + 4e6) / 320e9)
    relu = 3 * (8e6 * b) / 320e9
    opt = OPTIMIZER_STATE_COPIES["sgd"] * 4e6 / 320e9
    assert compute_time_s(g, T4, b, ROOFLINE_ONLY) == pytest.approx(mm + relu + opt)


def test_ring_all_reduce_formula() -> None:
    sync = SyncModel(intra_efficiency=0.5, inter_efficiency=0.25, latency_s=1e-4, gamma=1.0)
    g_bytes = 100e6
    assert sync_time_s(g_bytes, 1, 1, T4, sync) == 0.0
    intra = 2 * 3 / 4 * g_bytes / (0.5 * 15.75e9) + 6 * 1e-4
    assert sync_time_s(g_bytes, 4, 1, T4, sync) == pytest.approx(intra)
    # across nodes the slower of PCIe and the 50 Gbit/s network (6.25 GB/s) carries the ring
    inter = 2 * 7 / 8 * g_bytes / (0.25 * 6.25e9) + 14 * 1e-4
    assert sync_time_s(g_bytes, 8, 2, T4, sync) == pytest.approx(inter)
    assert sync_time_s(g_bytes, 8, 2, T4, sync, inter_node_gbit_s=400) < inter


def test_shipped_coefficients_load_and_round_trip() -> None:
    coef = load_coefficients()
    assert coefficients_from_dict(coefficients_to_dict(coef)) == coef
    lo, hi = coef.interval_1gpu
    assert lo < 0 < hi
    assert set(coef.kernel_weights) == {"conv", "gemm", "rnn"}
    with pytest.raises(ValueError, match="retrain"):
        coefficients_from_dict({**coefficients_to_dict(coef), "schema_version": 0})


@settings(max_examples=30, deadline=None)
@given(n=st.sampled_from([1, 2, 4, 8]), b=st.integers(1, 256),
       app=st.sampled_from(["imagenet", "bert", "cifar10", "ncf"]))
def test_interval_brackets_the_prediction(n: int, b: int, app: str) -> None:
    coef = load_coefficients()
    p = predict_step(load_graph(app), BUILTIN_DEVICES["A100"], n, b, coef)
    assert 0 < p.step_time_lo_s < p.step_time_s < p.step_time_hi_s
    lo, hi = interval_factors(coef, multi_gpu=n > 1)
    assert p.step_time_lo_s == pytest.approx(lo * p.step_time_s)
    assert p.step_time_hi_s == pytest.approx(hi * p.step_time_s)
    assert p.step_time_s >= p.compute_s - 1e-12 and p.sync_s >= 0
    assert (p.sync_s == 0) == (n == 1)


def test_faster_device_is_faster_and_calibration_scales_compute() -> None:
    coef = load_coefficients()
    g = load_graph("imagenet")
    t4 = predict_step(g, T4, 1, 64, coef).step_time_s
    h100 = predict_step(g, BUILTIN_DEVICES["H100"], 1, 64, coef).step_time_s
    assert h100 < t4
    cal = predict_step(g, T4, 4, 64, coef, calibration=1.5)
    base = predict_step(g, T4, 4, 64, coef)
    assert cal.compute_s == pytest.approx(1.5 * base.compute_s)
    assert cal.sync_s == pytest.approx(base.sync_s)


def test_fixed_per_step_cost_does_not_shrink_on_a_faster_device() -> None:
    coef = load_coefficients()
    ncf = load_graph("ncf")  # host-bound: microseconds of GPU work per step
    t4 = compute_time_s(ncf, T4, 32, coef)
    h100 = compute_time_s(ncf, BUILTIN_DEVICES["H100"], 32, coef)
    assert h100 > 0.5 * t4  # far from the 8x peak ratio


def test_predict_grid_is_every_combination() -> None:
    coef = load_coefficients()
    rows = predict_grid(load_graph("cifar10"), T4, [1, 2, 4], [32, 64], coef)
    assert [(r.gpus, r.local_batch) for r in rows] == [(n, b) for n in (1, 2, 4)
                                                       for b in (32, 64)]
    assert set(rows[0].row()) == {"gpus", "local_batch", "step_time_s", "step_time_lo_s",
                                  "step_time_hi_s", "compute_s", "sync_s"}
    with pytest.raises(ValueError, match="nodes"):
        predict_step(load_graph("cifar10"), T4, 2, 32, coef, nodes=3)


def test_app_offset_multiplies_compute() -> None:
    coef = load_coefficients()
    g = load_graph("imagenet")
    c0 = replace(coef, app_offsets={})
    c1 = replace(coef, app_offsets={"imagenet": math.log(2.0)})
    assert compute_time_s(g, T4, 32, c1) == pytest.approx(2 * compute_time_s(g, T4, 32, c0))
