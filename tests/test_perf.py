"""Invariants of the job models, batch-size search and the shipped profiles."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.perf import (
    EfficiencyParams,
    EnergyParams,
    JobProfile,
    ThroughputParams,
    batch_bounds,
    best_batch,
    ecu,
    efficiency,
    energy_kwh,
    golden_section_max,
    iteration_time,
    load_default_profiles,
    overlap_time,
    power_w,
    profile_from_dict,
    profile_to_dict,
    profiles_from_json,
    profiles_to_json,
    sync_time,
    throughput,
)

pos = st.floats(1e-4, 1.0)
small = st.floats(0.0, 1e-2)


@st.composite
def throughput_params(draw: st.DrawFn) -> ThroughputParams:
    """Random parameters; crossing nodes is never cheaper than staying in one."""
    alpha_r, beta_r = draw(pos) / 10, draw(small)
    return ThroughputParams(
        alpha_c=draw(pos) / 10, beta_c=draw(st.floats(1e-6, 1e-2)),
        alpha_r=alpha_r, beta_r=beta_r,
        alpha_n=alpha_r + draw(pos), beta_n=beta_r + draw(small),
        gamma=draw(st.floats(1.0, 10.0)),
    )


def _profile(tp: ThroughputParams | None = None, phi: float = 500.0) -> JobProfile:
    tp = tp or ThroughputParams(0.02, 7e-4, 0.12, 2.6e-3, 0.03, 2e-4, 1.9)
    eff = EfficiencyParams(m0=128, min_batch=128, max_batch=4096, max_local_batch=512,
                           phi_progress=(0.0, 1.0), phi_values=(phi, phi * 100))
    return JobProfile("toy", "T4", tp, eff, EnergyParams(20.0, 0.02, 70.0))


@settings(max_examples=200, deadline=None)
@given(phi=st.floats(1e-3, 1e7), m0=st.integers(1, 1000), k=st.floats(1.0, 100.0))
def test_efficiency_in_unit_interval_and_falls_with_batch(phi: float, m0: int, k: float) -> None:
    m = np.array([m0, m0 * k, m0 * k * 2])
    e = efficiency(phi, m0, m)
    assert np.all(e > 0) and np.all(e <= 1.0 + 1e-12)
    assert e[0] == pytest.approx(1.0)
    assert np.all(np.diff(e) <= 1e-12)


@settings(max_examples=200, deadline=None)
@given(tp=throughput_params(), m=st.integers(1, 4096), phi=st.floats(1.0, 1e6))
def test_goodput_is_throughput_times_efficiency(tp: ThroughputParams, m: int, phi: float) -> None:
    prof = _profile(tp)
    n = np.array([1, 2, 4, 8, 16])
    got = ecu(prof, n, m, phi=phi)
    want = throughput(tp, n, m) * efficiency(phi, 128, m)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@settings(max_examples=200, deadline=None)
@given(tp=throughput_params(), local=st.integers(1, 512))
def test_scaling_is_sublinear_in_gpu_count(tp: ThroughputParams, local: int) -> None:
    n = np.array([1, 2, 4, 8, 16, 32, 64])
    x = throughput(tp, n, local * n)  # weak scaling: fixed local batch
    per_gpu = x / n
    assert np.all(np.diff(per_gpu) <= per_gpu[:-1] * 1e-9 + 1e-12)
    assert np.all(x[1:] <= x[0] * n[1:] * (1 + 1e-9))


@settings(max_examples=100, deadline=None)
@given(tp=throughput_params(), m=st.integers(1, 4096))
def test_iteration_time_at_least_compute_and_sync(tp: ThroughputParams, m: int) -> None:
    n = np.array([1, 2, 8, 9, 32])
    t = iteration_time(tp, n, m)
    t_comp = tp.alpha_c + tp.beta_c * m / n
    assert np.all(t >= t_comp * (1 - 1e-12))
    assert t[0] == pytest.approx(t_comp[0])


@settings(max_examples=100, deadline=None)
@given(c=st.floats(1e-4, 10), s=st.floats(0, 10), g=st.floats(1, 10))
def test_overlap_lies_between_max_and_sum(c: float, s: float, g: float) -> None:
    t = overlap_time(c, s, g)
    assert max(c, s) - 1e-12 <= t <= c + s + 1e-12
    assert overlap_time(c, s, 1.0) == pytest.approx(c + s)


@settings(max_examples=50, deadline=None)
@given(tp=throughput_params(), m=st.integers(1, 4096))
def test_one_formula_for_packed_and_placed_iterations(tp: ThroughputParams, m: int) -> None:
    """perf.iteration_time (nodes implied by packing) and fit.placement_iteration_time
    (nodes given) agree where the placements agree: one definition behind both."""
    from workbench.fit import placement_iteration_time

    n = np.array([1, 2, 4, 8, 16, 32])
    nodes = np.ceil(n / 8)
    packed = iteration_time(tp, n, m * n, gpus_per_node=8)
    placed = placement_iteration_time(tp, nodes, n, m)
    np.testing.assert_allclose(packed, placed, rtol=1e-12)
    assert sync_time(tp, 1, False) == 0.0


def test_power_and_energy_units() -> None:
    prof = _profile()
    p = power_w(prof, 4, 512)
    x = throughput(prof.throughput, 4, 512)
    assert p == pytest.approx(min(4 * 20.0 + 0.02 * x, 4 * 70.0))
    assert energy_kwh(prof, 4, 512, 900.0, pue=1.2) == pytest.approx(p * 900 / 3.6e6 * 1.2)


def test_power_is_capped_at_board_limit() -> None:
    prof = JobProfile("toy", "T4", _profile().throughput, _profile().efficiency,
                      EnergyParams(60.0, 10.0, 70.0))
    assert power_w(prof, 2, 1024) == pytest.approx(140.0)


@pytest.mark.parametrize(
    ("f", "lo", "hi", "want"),
    [
        (lambda x: -(x - 3.0) ** 2, 0.0, 10.0, 3.0),
        (lambda x: x, 0.0, 10.0, 10.0),
        (lambda x: -x, 2.0, 10.0, 2.0),
        (lambda x: np.log(x) - x / 50.0, 1.0, 1000.0, 50.0),
    ],
)
def test_golden_section_finds_known_maxima(f, lo: float, hi: float, want: float) -> None:
    assert golden_section_max(f, lo, hi, tol=1e-3) == pytest.approx(want, abs=1e-2)


def _grid_best(prof: JobProfile, n: int, progress: float, objective: str) -> float:
    lo, hi = batch_bounds(prof, n)
    m = np.arange(lo, hi + 1)
    if objective == "ecu":
        v = ecu(prof, n, m, progress)
    else:
        v = ecu(prof, n, m, progress) / power_w(prof, n, m)
    return float(v.max())


@pytest.mark.parametrize("objective", ["ecu", "ecu_per_kwh"])
def test_best_batch_matches_fine_grid_on_shipped_profiles(objective: str) -> None:
    profiles = load_default_profiles()
    for prof in profiles[::2]:
        for n in (1, 4, 8, 16):
            for progress in (0.0, 0.5, 1.0):
                m = best_batch(prof, n, progress, objective=objective)
                lo, hi = batch_bounds(prof, n)
                assert lo <= m <= hi
                got = float(ecu(prof, n, m, progress))
                if objective == "ecu_per_kwh":
                    got /= float(power_w(prof, n, m))
                # the batch found is within 0.1% of the best value on the integer grid
                assert got >= _grid_best(prof, n, progress, objective) * (1 - 1e-3), (
                    prof.app, prof.gpu_type, n, progress)


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        # progress 0, 0.1, 0.25, 0.5, 0.75, 1 on H800 (see docs/profiles.md); the H800
        # profiles are predicted from the apps' graphs (workbench.compute)
        ("yolov3", [4, 64, 64, 64, 64, 64]),
        ("cifar10", [8, 32, 32, 32, 32, 32]),
        ("deepspeech2", [16, 64, 64, 64, 64, 64]),
    ],
)
def test_best_gpu_count_drifts_up_as_phi_grows(app: str, expected: list[int]) -> None:
    prof = next(p for p in load_default_profiles() if p.app == app and p.gpu_type == "H800")
    counts = (1, 2, 4, 8, 16, 32, 64)

    def best_n(progress: float) -> int:
        vals = [float(ecu(prof, n, best_batch(prof, n, progress), progress)) for n in counts]
        return counts[int(np.argmax(vals))]

    best = [best_n(p) for p in (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)]
    assert best == sorted(best)  # never shrinks as phi grows
    assert best == expected


def test_shipped_profiles_cover_apps_and_gpus() -> None:
    profiles = load_default_profiles()
    keys = {(p.app, p.gpu_type) for p in profiles}
    apps = {"cifar10", "imagenet", "bert", "deepspeech2", "yolov3", "ncf"}
    assert keys == {(a, g) for a in apps for g in ("H800", "A100", "Ascend910B")}
    for p in profiles:
        assert p.derived and "Pollux" in p.source and "Zeus" in p.source
        assert p.energy.max_power_w in (700.0, 400.0)
        # faster accelerators are faster on one GPU at the same batch
    x = {(p.app, p.gpu_type): float(throughput(p.throughput, 1, p.efficiency.m0))
         for p in profiles}
    for a in apps:
        assert x[(a, "H800")] > x[(a, "A100")] > x[(a, "Ascend910B")]


def test_profiles_json_round_trip(tmp_path) -> None:
    profiles = load_default_profiles()
    assert profile_from_dict(profile_to_dict(profiles[0])) == profiles[0]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profiles_to_json(profiles)))
    assert load_default_profiles(path) == profiles
    with pytest.raises(ValueError, match="schema_version"):
        profiles_from_json({"schema_version": 99, "profiles": []})
    bad = profile_to_dict(profiles[0])
    bad["throughput"]["gamma"] = 0.5
    with pytest.raises(ValueError, match="cifar10/H800"):
        profile_from_dict(bad)


def test_scaled_divides_time_terms() -> None:
    tp = _profile().throughput
    s = tp.scaled(2.0, intra_sync_speed=4.0, inter_sync_speed=8.0)
    assert s.alpha_c == tp.alpha_c / 2 and s.beta_r == tp.beta_r / 4
    assert s.alpha_n == tp.alpha_n / 8 and s.gamma == tp.gamma
    assert tp.scaled(2.0).alpha_r == tp.alpha_r  # the old one-argument form keeps sync
    with pytest.raises(ValueError):
        tp.scaled(0.0)
