"""Kernel-level predictor: roofline bound, features, model forms as arrays, storage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.compute.devices import BUILTIN_DEVICES
from workbench.compute.kernels import (
    KINDS,
    KernelModel,
    KindModel,
    flops_bytes,
    kernel_features,
    read_kernel_model,
    roofline_s,
    write_kernel_model,
)

V100 = BUILTIN_DEVICES["V100"]
SHIPPED = read_kernel_model()
OPS = ["binary", "unary", "gelu", "tanh", "copy", "adam"]


def _dims(kind: str, draw: st.DrawFn) -> list[int]:
    small = st.integers(1, 4096)
    if kind in ("linear", "bmm"):
        return [draw(st.integers(1, 512)) if kind == "bmm" else 1,
                draw(small), draw(small), draw(small), 0, 0, 0]
    if kind == "conv":
        return [draw(st.integers(1, 64)), draw(st.integers(3, 1024)),
                draw(st.integers(3, 1024)), draw(st.sampled_from([1, 3, 5, 7])),
                draw(st.integers(7, 256)), draw(st.sampled_from([1, 2])), 1]
    if kind in ("ln", "softmax"):
        return [draw(st.integers(1, 1 << 17)), draw(st.integers(1, 1 << 15)), 0, 0, 0, 0, 0]
    return [draw(st.integers(1, 1 << 28)), 0, 0, 0, 0, 0, 0]


@st.composite
def kernels(draw: st.DrawFn) -> tuple[str, np.ndarray, list[str], str, str]:
    kind = draw(st.sampled_from(KINDS))
    n = draw(st.integers(1, 6))
    dims = np.array([_dims(kind, draw) for _ in range(n)], dtype=np.int64)
    ops = [draw(st.sampled_from(OPS)) for _ in range(n)]
    dev = draw(st.sampled_from(sorted(BUILTIN_DEVICES)))
    precision = "bf16" if BUILTIN_DEVICES[dev].bf16_tflops and draw(st.booleans()) else "fp32"
    return kind, dims, ops, dev, precision


@settings(max_examples=200, deadline=None)
@given(k=kernels())
def test_predicted_time_is_never_below_the_roofline(k: tuple) -> None:
    """The shipped model on random kernels of every kind, on every built-in device."""
    kind, dims, ops, dev, precision = k
    f, b = flops_bytes(kind, dims, ops, 2 if precision == "bf16" else 4)
    pred, roof = SHIPPED.predict_s(kind, dims, f, b, ops, BUILTIN_DEVICES[dev], precision)
    assert np.all(np.isfinite(pred)) and np.all(roof > 0)
    assert np.all(pred >= roof * (1 - 1e-12))


def test_roofline_by_hand_and_the_winograd_bound() -> None:
    dims = np.array([[1, 1024, 1024, 1024, 0, 0, 0]])
    f, b = flops_bytes("linear", dims)
    assert f[0] == 2 * 1024**3 and b[0] == 4 * 3 * 1024**2
    assert roofline_s("linear", f, b, dims, V100)[0] == pytest.approx(f[0] / 14e12)
    conv = np.array([[8, 64, 64, 3, 56, 1, 1], [8, 64, 64, 3, 56, 2, 1]])
    fc, bc = flops_bytes("conv", conv)
    r = roofline_s("conv", fc, bc, conv, V100)
    assert r[0] == pytest.approx(max(fc[0] / 4 / 14e12, bc[0] / 900e9))  # Winograd F(4x4,3x3)
    assert r[1] == pytest.approx(max(fc[1] / 14e12, bc[1] / 900e9))  # stride 2: direct


def test_features_see_waves_over_the_sms() -> None:
    dims = np.array([[1, 128 * 80, 128, 64, 0, 0, 0], [1, 128 * 81, 128, 64, 0, 0, 0]])
    f, b = flops_bytes("linear", dims)
    x, _ = kernel_features("linear", dims, f, b, None, V100, ("tdp",))
    assert x[0, 2] == pytest.approx(0.0)  # one full wave of 128x128 tiles on 80 SMs
    assert x[0, 3] == pytest.approx(1.0) and x[1, 3] == pytest.approx(81 / 160)
    assert x.shape[1] == 2 + 6 + 4 + 2 + 1


def _toy(form: str) -> KernelModel:
    from workbench.compute.kernel_train import fit_regressor

    rng = np.random.default_rng(0)
    dims = np.column_stack([np.ones(600), rng.integers(16, 4096, (600, 3)),
                            np.zeros((600, 3))]).astype(np.int64)
    f, b = flops_bytes("linear", dims)
    x, roof = kernel_features("linear", dims, f, b, None, V100, ("tdp",))
    y = np.log1p(1e-5 / roof)  # a 10 us launch floor over the roofline
    reg = fit_regressor(form, x, y)
    return KernelModel({"linear": KindModel("linear", form, ("tdp",), reg)})


@pytest.mark.parametrize("form", ["gbm", "mlp", "ridge"])
def test_forms_round_trip_through_the_file(tmp_path: Path, form: str) -> None:
    model = _toy(form)
    write_kernel_model(model, tmp_path / "k.npz")
    again = read_kernel_model(tmp_path / "k.npz")
    dims = np.array([[1, 512, 512, 512, 0, 0, 0], [1, 32, 64, 128, 0, 0, 0]])
    f, b = flops_bytes("linear", dims)
    p1, _ = model.predict_s("linear", dims, f, b, None, V100)
    p2, _ = again.predict_s("linear", dims, f, b, None, V100)
    np.testing.assert_allclose(p1, p2, rtol=1e-5)
    assert again.kinds["linear"].form == form


def test_trees_as_arrays_reproduce_lightgbm() -> None:
    import lightgbm as lgb

    from workbench.compute.kernel_train import GBM_PARAMS, _trees

    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 5))
    y = np.sin(x[:, 0]) + x[:, 1] ** 2
    m = lgb.LGBMRegressor(**GBM_PARAMS, n_jobs=1, verbose=-1).fit(x, y)
    np.testing.assert_allclose(_trees(m.booster_).predict(x), m.predict(x), atol=1e-9)


def test_shipped_model_is_small_and_covers_every_kind() -> None:
    from workbench.compute.kernels import kernel_model_path

    assert set(SHIPPED.kinds) == set(KINDS)
    assert kernel_model_path().stat().st_size < 1_500_000
    assert SHIPPED.trained_on["source"].startswith("NeuSight")


@pytest.mark.shared_data
def test_kernel_frame_reads_neusight_with_its_result_orientation(shared_data: Path) -> None:
    from workbench.compute.neusight import read_kernels

    k = read_kernels(shared_data / "profiles", ops=("linear",))
    assert set(k["device"]) == {"P4", "P100", "T4", "V100", "A100-PCIe-40GB"}
    assert (k["kind"] == "linear").all() and (k["time_s"] > 0).all()
    assert isinstance(k, pd.DataFrame) and len(k) > 30_000
