"""The online EMA estimator converges to a known truth from noisy slot observations."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from workbench.estimate import OnlineEstimator
from workbench.perf import ecu, load_default_profiles, throughput


def _prior():
    return next(p for p in load_default_profiles() if p.app == "cifar10" and p.gpu_type == "A100")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_converges_to_truth_within_tolerance(seed: int) -> None:
    """Truth: 30% slower than the prior and phi = 2000; 10% lognormal throughput noise,
    30% noise on grad_var, 10% on grad_sqr. After 60 slots with alpha = 0.1 the speed
    factor is within 5% and phi within 15% of the truth."""
    prior = _prior()
    truth = replace(prior, throughput=prior.throughput.scaled(1 / 1.3, 1 / 1.3, 1 / 1.3))
    phi_true, m0 = 2000.0, prior.efficiency.m0
    sqr_true = 0.5
    var_true = phi_true * sqr_true / m0
    rng = np.random.default_rng(seed)
    est = OnlineEstimator(prior, alpha=0.1)
    assert est.speed_factor == 1.0 and est.phi(0.0) == pytest.approx(
        float(prior.efficiency.phi(0.0)))
    for slot in range(60):
        n, m = (4, 1024) if slot % 2 else (8, 2048)
        x = float(throughput(truth.throughput, n, m)) * math.exp(rng.normal(0, 0.10))
        est.update(n, m, x, sqr_true * math.exp(rng.normal(0, 0.10)),
                   var_true * math.exp(rng.normal(0, 0.30)))
    assert est.slots == 60
    assert est.speed_factor == pytest.approx(1 / 1.3, rel=0.05)
    assert est.phi() == pytest.approx(phi_true, rel=0.15)
    corrected = est.corrected_profile()
    assert float(throughput(corrected.throughput, 8, 2048)) == pytest.approx(
        float(throughput(truth.throughput, 8, 2048)), rel=0.05)
    # the estimate feeds the model directly
    assert float(ecu(corrected, 8, 2048, phi=est.phi())) > 0


def test_tracks_a_growing_noise_scale() -> None:
    """phi doubles every 10 slots; the EMA lags but stays within a factor 1.6."""
    prior = _prior()
    est = OnlineEstimator(prior, alpha=0.3)
    for slot in range(60):
        phi = 100.0 * 2 ** (slot / 10)
        est.update(8, 2048, None, 1.0, phi / prior.efficiency.m0)
    assert phi / 1.6 < est.phi() <= phi


def test_skips_missing_and_invalid_observations() -> None:
    est = OnlineEstimator(_prior())
    est.update(4, 512, float("nan"), None, None)
    est.update(4, 512, -1.0, 0.0, 1.0)
    assert est.speed_factor == 1.0 and est.slots == 2
    with pytest.raises(ValueError):
        OnlineEstimator(_prior(), alpha=0.0)


def test_predicted_profile_is_planned_slow_near_its_deadline() -> None:
    from datetime import UTC, datetime

    from workbench.estimate import planning_speed_factor
    from workbench.model import Job

    prof = replace(_prior(), step_time_interval=(0.5, 2.0))
    est = OnlineEstimator(prof)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    job = Job(job_id="j", kind="training", app=prof.app, arrival=t0, home="a",
              requested_gpus=1, gpu_counts=(1,), batch_size=prof.efficiency.m0,
              work_samples=1e6, deadline=datetime(2025, 1, 3, tzinfo=UTC))
    rate = float(ecu(prof, 1, prof.efficiency.m0, 0.0))
    run_s = 1e6 / rate
    assert planning_speed_factor(est, job, 1.0, 10 * run_s) == 1.0  # far from the deadline
    assert planning_speed_factor(est, job, 1.0, 1.5 * run_s) == pytest.approx(0.5)  # 1 / hi
    assert planning_speed_factor(est, job, 1.0, None) == 1.0  # no deadline
    est.update(1, prof.efficiency.m0, observed_throughput_sps=0.8 * rate)
    assert planning_speed_factor(est, job, 1.0, 1.5 * run_s) == pytest.approx(est.speed_factor)
    fitted = OnlineEstimator(replace(prof, step_time_interval=None))  # measured: no caution
    assert planning_speed_factor(fitted, job, 1.0, 1.5 * run_s) == 1.0
