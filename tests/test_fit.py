"""Fits reproduce known parameters on synthetic data and meet the error target on real data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.cli import main
from workbench.fit import (
    POLLUX_APPS,
    fit_energy_params,
    fit_pollux_app,
    fit_throughput_params,
    fit_zeus_gpu,
    mape,
    noise_scale,
    phi_trajectory,
    placement_iteration_time,
)
from workbench.gpus import GPU_SPECS, derive_throughput
from workbench.perf import EfficiencyParams, ThroughputParams, load_default_profiles
from workbench.profiles import (
    derive_efficiency,
    derive_energy,
    import_profiles,
    write_default_profiles,
)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PROFILES = SHARED_DATA / "profiles"
needs_data = pytest.mark.skipif(
    not PROFILES.is_dir(), reason=f"real data folder {PROFILES} is absent (CI always has it)"
)

TRUE = ThroughputParams(alpha_c=0.02, beta_c=7e-4, alpha_r=0.03, beta_r=2e-4,
                        alpha_n=0.12, beta_n=2.6e-3, gamma=1.9)


def _synthetic_timings(p: ThroughputParams, noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for nodes, reps in [(1, 1), (1, 2), (1, 3), (1, 4), (2, 4), (2, 8), (4, 16), (8, 32)]:
        for b in (16, 32, 64, 128, 256):
            t_comp = p.alpha_c + p.beta_c * b
            t_iter = float(placement_iteration_time(p, nodes, reps, b))
            sync = t_iter - t_comp if reps > 1 else 0.0
            f = float(np.exp(rng.normal(0, noise))) if noise else 1.0
            rows.append({"num_nodes": nodes, "num_replicas": reps, "local_bsz": b,
                         "step_time": t_iter * f, "sync_time": sync * f})
    return pd.DataFrame(rows)


def test_throughput_fit_recovers_known_parameters() -> None:
    fit = fit_throughput_params(_synthetic_timings(TRUE))
    assert fit.alpha_c == pytest.approx(TRUE.alpha_c, rel=0.05)
    assert fit.beta_c == pytest.approx(TRUE.beta_c, rel=0.05)
    assert fit.alpha_n == pytest.approx(TRUE.alpha_n, rel=0.15)
    assert fit.gamma == pytest.approx(TRUE.gamma, rel=0.15)
    rows = _synthetic_timings(TRUE)
    pred = placement_iteration_time(fit, rows.num_nodes, rows.num_replicas, rows.local_bsz)
    assert mape(pred, rows.step_time) < 0.01


def test_one_node_rows_keep_pollux_prior_on_crossing_nodes() -> None:
    """Without multi-node rows the inter-node terms are Pollux's prior, 1.1 times the
    intra-node ones: a placement across nodes is never predicted to sync for free."""
    rows = _synthetic_timings(TRUE)
    one_node = rows[rows.num_nodes == 1]
    fit = fit_throughput_params(one_node)
    assert fit.alpha_n == pytest.approx(1.1 * fit.alpha_r, rel=1e-12)
    assert fit.beta_n == pytest.approx(1.1 * fit.beta_r, rel=1e-12)
    same = placement_iteration_time(fit, 1, 4, 64)
    across = placement_iteration_time(fit, 2, 4, 64)
    assert across > same
    with_nodes = fit_throughput_params(rows)  # measured: the data decide
    assert with_nodes.alpha_n == pytest.approx(TRUE.alpha_n, rel=0.15)


def test_throughput_fit_tolerates_noise() -> None:
    rows = _synthetic_timings(TRUE, noise=0.05, seed=1)
    fit = fit_throughput_params(rows)
    clean = _synthetic_timings(TRUE)
    pred = placement_iteration_time(fit, clean.num_nodes, clean.num_replicas, clean.local_bsz)
    assert mape(pred, clean.step_time) < 0.03


def test_energy_fit_recovers_linear_power() -> None:
    x = np.linspace(100, 5000, 12)
    rows = pd.DataFrame({"throughput_sps": x, "average_power": 40.0 + 0.03 * x})
    e = fit_energy_params(rows, max_power_w=250.0)
    assert (e.a1_w, e.a2_w_per_sps, e.max_power_w) == pytest.approx((40.0, 0.03, 250.0))


def test_noise_scale_and_trajectory() -> None:
    assert noise_scale([2.0, 0.0, 1.0], [4.0, 1.0, -1.0], m0=8) == pytest.approx(
        [16.0, np.nan, np.nan], nan_ok=True)
    # two runs, phi grows geometrically; the trajectory is their geometric median
    prog = np.arange(1, 41, dtype=float)
    runs = {b: pd.DataFrame({"progress": prog, "grad_sqr": np.ones(40),
                             "grad_var": np.geomspace(1, 100, 40) * k})
            for b, k in ((8, 1.0), (32, 4.0))}
    p, v = phi_trajectory(runs, m0=8, n_knots=5)
    assert p[0] == pytest.approx(0.5 / 40) and v[0] == pytest.approx(8 * 2.0)
    assert len(p) == 5 and np.all(np.diff(p) > 0) and np.all(np.diff(v) > 0)


def test_derivation_factors() -> None:
    h = derive_throughput(TRUE, "H800")
    s = GPU_SPECS["H800"]
    assert h.beta_c == pytest.approx(TRUE.beta_c / s.compute_speed)
    assert h.alpha_r == pytest.approx(TRUE.alpha_r / s.intra_sync_speed)
    assert h.alpha_n == pytest.approx(TRUE.alpha_n / s.inter_sync_speed)
    eff = EfficiencyParams(8, 8, 512, 8, (0.0,), (10.0,))
    assert derive_efficiency(eff, "A100").max_local_batch == 40  # 80 GB / 16 GB
    e = derive_energy(0.2, 0.9, 1000.0, "A100")
    assert e.a1_w == pytest.approx(80.0) and e.a1_w + e.a2_w_per_sps * 1000 == pytest.approx(360)
    with pytest.raises(KeyError, match="known"):
        derive_throughput(TRUE, "B200")


@pytest.mark.slow
@needs_data
@pytest.mark.shared_data
@pytest.mark.parametrize("app", POLLUX_APPS)
def test_pollux_step_time_error_within_target(app: str) -> None:
    fit = fit_pollux_app(PROFILES / "pollux" / app)
    assert fit.mape <= 0.10, f"{app}: median APE {fit.mape:.3f}"
    assert fit.efficiency.m0 == fit.efficiency.min_batch
    assert all(v > 0 for v in fit.efficiency.phi_values)


@needs_data
@pytest.mark.shared_data
@pytest.mark.parametrize("gpu", ["v100", "a40", "p100", "rtx6000"])
def test_zeus_power_error_within_target(gpu: str) -> None:
    fits = fit_zeus_gpu(PROFILES / "zeus", gpu)
    assert len(fits) == 6
    for f in fits:
        assert f.mape <= 0.10, f"{gpu} {f.dataset}/{f.network}: {f.mape:.3f}"


@pytest.mark.slow
@needs_data
@pytest.mark.shared_data
def test_shipped_profiles_are_regenerable(tmp_path: Path) -> None:
    out = tmp_path / "profiles.json"
    report = write_default_profiles(PROFILES, out)
    assert set(report["throughput_mape"]) == set(POLLUX_APPS)
    regenerated = load_default_profiles(out)
    shipped = load_default_profiles()
    assert [(p.app, p.gpu_type) for p in regenerated] == [(p.app, p.gpu_type) for p in shipped]
    for a, b in zip(regenerated, shipped, strict=True):
        assert a.throughput.beta_c == pytest.approx(b.throughput.beta_c, rel=1e-3)
        assert a.energy.a1_w == pytest.approx(b.energy.a1_w, rel=1e-3)


@pytest.mark.slow
@needs_data
@pytest.mark.shared_data
def test_cli_fit_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "throughput", "--app", "cifar10", "--profiles",
                 str(PROFILES / "pollux"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"params", "mape", "rows"} and doc["mape"] <= 0.10
    assert doc["params"]["throughput"]["gamma"] >= 1
    assert main(["fit", "energy", "--gpu", "v100", "--profiles", str(PROFILES), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["mape"]) == set(doc["params"]) and len(doc["rows"]) > 50
    assert main(["fit", "energy", "--gpu", "v100", "--profiles", str(PROFILES)]) == 0
    assert "imagenet/resnet50" in capsys.readouterr().out


def test_cli_fit_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "throughput", "--app", "cifar10", "--profiles", str(tmp_path)]) == 2
    assert "placements.csv" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["", 'a,b\n1,2,3,4\n"x\n'])
def test_cli_fit_unreadable_csv_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    (tmp_path / "summary_power_v100.csv").write_text(text)
    assert main(["fit", "energy", "--gpu", "v100", "--profiles", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "summary_power_v100.csv is not a readable CSV" in err and "Traceback" not in err


class _FakeStore:
    def __init__(self) -> None:
        self.saved: list = []

    def save_profiles(self, profiles) -> int:
        self.saved = list(profiles)
        return len(self.saved)

    def load_profiles(self) -> list:
        return list(self.saved)


@pytest.mark.slow
@needs_data
@pytest.mark.shared_data
def test_import_profiles_into_store(tmp_path: Path) -> None:
    from workbench.store import Store

    with Store(tmp_path / "w.duckdb") as store:
        n = import_profiles(store, "pollux", PROFILES / "pollux")
        assert n == 6 * 4
        got = store.load_profiles()
        assert {p.gpu_type for p in got} == {"T4", "H800", "A100", "Ascend910B"}
        assert all(p.derived == (p.gpu_type != "T4") for p in got)
        assert import_profiles(store, "zeus", PROFILES / "zeus") == 24
    fake = _FakeStore()
    assert import_profiles(fake, "zeus", PROFILES / "zeus") == 18  # defaults when empty
    with pytest.raises(ValueError, match="pollux"):
        import_profiles(fake, "mlperf", PROFILES)
