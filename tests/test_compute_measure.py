"""Step-time measurement with a fake GPU, and its use by the predictor and the fit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from workbench.compute.measure import (
    StepMeasurement,
    calibration_from_store,
    load_measurements,
    measure_command,
    measurement_timings,
    save_measurement,
    time_command,
)
from workbench.fit import fit_throughput_params
from workbench.measure import GpuSample
from workbench.store import Store


class FakeGpu:
    """One GPU drawing 150 W (the NVML device interface of workbench.measure)."""

    def __init__(self) -> None:
        self.closed = False

    def device_count(self) -> int:
        return 1

    def read(self, index: int) -> GpuSample:
        return GpuSample(power_w=150.0, energy_j=float("nan"), util_pct=90.0,
                         mem_used_mb=2048.0, sm_clock_mhz=1500.0)

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_measure_command_with_a_fake_gpu_stores_time_and_power(tmp_path: Path) -> None:
    gpu = FakeGpu()
    with Store(tmp_path / "s.duckdb") as store:
        m, mid, rc = measure_command(store, "imagenet", "V100", 1, 32, 20,
                                     [sys.executable, "-c", "pass"], interval_s=0.01,
                                     gpu=gpu, clock=Clock(1.0))
        assert rc == 0 and m is not None and gpu.closed
        assert m.step_time_s == pytest.approx(1.0 / 20)  # the fake clock ticks 1 s a call
        assert m.profile_id is not None
        rows = load_measurements(store, "imagenet", "v100")
        assert rows["measurement_id"].tolist() == [mid]
        runs = store.table("gpu_profile_runs")
        assert runs["profile_id"].tolist() == [m.profile_id]
        assert runs.loc[0, "mean_power_w"] == pytest.approx(150.0)


def test_time_command_subtracts_warmup_and_rejects_nonsense() -> None:
    class Proc:
        returncode = 0

    step, rc = time_command(["x"], 10, warmup_s=1.0, clock=Clock(3.0),
                            run=lambda cmd, check: Proc())
    assert step == pytest.approx(0.2) and rc == 0
    with pytest.raises(ValueError, match="warmup"):
        time_command(["x"], 10, warmup_s=5.0, clock=Clock(3.0), run=lambda cmd, check: Proc())
    with pytest.raises(ValueError, match="nodes"):
        StepMeasurement("a", "T4", gpus=1, nodes=2, local_batch=1, step_time_s=1.0, steps=1)


def test_measurements_feed_the_fit_and_the_calibration(tmp_path: Path) -> None:
    # step = 0.01 + 0.002 * b on one GPU; sync 0.02 on two
    with Store(tmp_path / "s.duckdb") as store:
        for n, b in [(1, 8), (1, 16), (1, 32), (1, 64), (2, 32), (2, 64)]:
            sync = 0.02 if n > 1 else None
            save_measurement(store, StepMeasurement(
                "cifar10", "A100", gpus=n, local_batch=b, steps=50,
                step_time_s=0.01 + 0.002 * b + (sync or 0.0), sync_time_s=sync))
        frame = load_measurements(store, "cifar10", "A100")
        timings = measurement_timings(frame)
        p = fit_throughput_params(timings)
        assert p.beta_c == pytest.approx(0.002, rel=0.05)
        assert p.alpha_c == pytest.approx(0.01, rel=0.1)
        # predicted compute = half the measured 1-GPU time -> factor 2
        f, n = calibration_from_store(store, "cifar10", "a100",
                                      lambda b: (0.01 + 0.002 * b) / 2)
        assert n == 4 and f == pytest.approx(2.0)
        assert calibration_from_store(store, "bert", "A100", lambda b: 1.0) == (1.0, 0)
