"""Training readers (on the shared data) and the kernel-correction fit (synthetic)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.compute.devices import BUILTIN_DEVICES
from workbench.compute.predict import roofline_time_s
from workbench.compute.train import fit_kernel_weights, interval_from_residuals

PROFILES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "profiles"
needs_data = pytest.mark.skipif(not PROFILES.is_dir(),
                                reason=f"real data folder {PROFILES} is absent (CI has it)")


def test_kernel_correction_recovers_a_constant_inefficiency() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for dev in ("V100", "P100", "M40"):
        for _ in range(60):
            f, b = 10 ** rng.uniform(8, 11), 10 ** rng.uniform(6, 9)
            t = roofline_time_s(f, b, BUILTIN_DEVICES[dev]) * math.exp(0.7)
            rows.append({"device": dev, "kind": "gemm", "flops": f, "bytes": b,
                         "kernels": 1.0, "time_s": t})
    w = fit_kernel_weights(pd.DataFrame(rows), BUILTIN_DEVICES)
    assert w["gemm"][0] + 1e-9 > 0.5  # intercept: log(t / t_roof) = 0.7, slopes pulled to 0
    assert w["conv"] == (0.0,) * 6  # no conv rows: pure roofline


def test_interval_is_the_5_95_range() -> None:
    lo, hi = interval_from_residuals(np.linspace(-1, 1, 101))
    assert lo == pytest.approx(-0.9) and hi == pytest.approx(0.9)


@needs_data
@pytest.mark.shared_data
def test_deepbench_and_step_time_readers() -> None:
    pytest.importorskip("openpyxl")
    from workbench.compute.train import read_deepbench, read_step_times

    k = read_deepbench(PROFILES / "deepbench" / "DeepBench_NV_V100.xlsx", "V100")
    counts = k["kind"].value_counts()
    assert counts["gemm"] == 160 and counts["conv"] >= 90 and counts["rnn"] >= 50
    assert (k["time_s"] > 0).all() and (k["flops"] > 0).all()
    # measured rates stay below 3x the FP32 peak (Winograd convolutions beat the nominal FLOPs)
    assert (k["flops"] / k["time_s"] < 3 * 14e12).all()
    s = read_step_times(PROFILES)
    assert set(s["device"]) == {"T4", "A40", "P100", "RTX6000", "V100"}
    assert set(s.loc[s["device"] == "T4", "app"]) == {"cifar10", "imagenet", "bert",
                                                      "deepspeech2", "yolov3", "ncf"}
    assert (s["gpus"] >= 1).all() and (s["step_time_s"] > 0).all()
