"""The runner: a RunSpec in, the run with its baseline, bound and attribution out."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers_policies import tiny_scenario, training_job

from workbench import runner
from workbench.caps import Caps
from workbench.forecast import default_forecast_mode
from workbench.model import Scenario
from workbench.policies import make_policy
from workbench.runner import (
    ForecastSettings,
    RunSpec,
    SimSettings,
    SpecError,
    run_spec,
    save_outcome,
    simulate_spec,
)
from workbench.sim import simulate
from workbench.store import Store


def _scenario() -> Scenario:
    prices = [[1.0, 0.4], [1.0, 0.4], [0.3, 1.0], [0.3, 1.0]] * 2
    jobs = [training_job("t1", "a", 1.5, deadline_slot=8),
            training_job("t2", "b", 1.0, arrival_slot=1, deadline_slot=8)]
    return tiny_scenario(jobs, prices=prices, n_slots=8)


def test_a_spec_is_the_same_run_as_the_simulator_given_the_same_choices() -> None:
    sc = _scenario()
    spec = RunSpec(sc.name, "lyapunov", knobs={"V": 3.0}, baseline=False)
    got, bound = simulate_spec(spec, sc)
    want = simulate(sc, make_policy("lyapunov", V=3.0), forecast_mode=default_forecast_mode(sc))
    assert bound is None
    assert got.metrics["cost"] == want.metrics["cost"]
    assert got.metrics["carbon_kg"] == want.metrics["carbon_kg"]
    # The forecast is decided in the runner: the honest default unless the spec says.
    assert got.meta["forecast_mode"] == default_forecast_mode(sc)
    perfect, _ = simulate_spec(RunSpec(sc.name, "lyapunov", forecast=ForecastSettings(
        "perfect"), baseline=False), sc)
    assert perfect.meta["forecast_mode"] == "perfect"


def test_the_knobs_stored_are_those_the_policy_was_built_with() -> None:
    sc = _scenario()
    res, _ = simulate_spec(RunSpec(sc.name, "lyapunov", knobs={"V": 2.0},
                                   sim=SimSettings(restart_s=45.0), baseline=False), sc)
    assert res.meta["knobs"] == {"V": 2.0, "restart_s": 45.0}
    assert res.meta["restart_s"] == 45.0


def test_run_spec_gives_baseline_attribution_and_a_resolved_percentage_cap() -> None:
    sc = _scenario()
    spec = RunSpec(sc.name, "lyapunov", caps=Caps(carbon_pct_below_baseline=10.0))
    out = run_spec(spec, sc)
    assert out.baseline is not None and out.baseline.policy == "asap-home"
    assert out.carbon_cap_kg == pytest.approx(0.9 * out.baseline.metrics["carbon_kg"])
    assert out.result.meta["knobs"]["carbon_cap_kg"] == pytest.approx(out.carbon_cap_kg)
    parts = out.attribution
    assert parts is not None
    saving = out.baseline.metrics["cost"] - out.result.metrics["cost"]
    assert sum(parts["cost"].values()) == pytest.approx(saving, abs=1e-9)
    # Without a baseline asked for, a percentage cap still runs one, but returns none.
    quiet = run_spec(RunSpec(sc.name, "lyapunov", caps=Caps(carbon_pct_below_baseline=10.0),
                             baseline=False), sc)
    assert quiet.baseline is None and quiet.attribution is None
    assert quiet.carbon_cap_kg == pytest.approx(out.carbon_cap_kg)


def test_the_hindsight_plan_reports_its_bound_through_the_declared_method() -> None:
    sc = _scenario()
    out = run_spec(RunSpec(sc.name, "offline"), sc)
    assert out.bound is not None and out.bound.kind in ("milp-optimal", "lp-relaxation")
    stored = out.result.meta["bound"]
    assert {k: stored[k] for k in out.bound.as_dict()} == out.bound.as_dict()
    assert math.isfinite(out.bound.cost) and out.bound.cost <= out.result.metrics["cost"] + 1e-9
    # The bound on equal work (its share beyond the horizon charged) bounds the replay's.
    assert stored["equal_work_cost"] >= out.bound.cost - 1e-9
    assert stored["equal_work_cost"] <= out.result.metrics["equal_work_cost"] + 1e-9
    for name in ("lyapunov", "lookahead", "asap-home", "greedy"):
        assert make_policy(name).hindsight_bound() is None


def test_a_comparison_is_metered_against_the_power_cap_it_is_not_given() -> None:
    sc = _scenario()
    spec = RunSpec(sc.name, "lyapunov", caps=Caps(power_kw=0.3))
    out = run_spec(spec, sc)
    assert out.baseline is not None
    assert out.baseline.meta["knobs"]["power_cap_kw"] == 0.3
    assert "power_cap_kw" in out.baseline.metrics


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"policy": "nope"}, "unknown policy 'nope'"),
    ({"policy": "lookahead", "knobs": {"V": 3}}, "policy 'lookahead' takes no knob 'V'"),
    ({"policy": "asap-home", "caps": Caps(carbon_kg=10)}, "takes no carbon cap"),
    ({"policy": "lyapunov", "knobs": {"carbon_cap_kg": 3}}, "through the spec's caps"),
    ({"policy": "lyapunov", "knobs": {"restart_s": 3}}, "through the spec's sim"),
])
def test_bad_specs_are_refused_with_the_fix(kwargs: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        RunSpec("tiny", **kwargs)


def test_settings_are_checked() -> None:
    with pytest.raises(SpecError, match="forecast mode"):
        ForecastSettings(mode="crystal-ball")
    with pytest.raises(SpecError, match="noise"):
        SimSettings(noise=-1.0)
    assert ForecastSettings("noisy").error_in_effect == runner.FORECAST_ERROR_DEFAULT
    assert ForecastSettings("perfect").error_in_effect == 0.0


def test_caps_naming_an_unknown_datacenter_are_refused_before_the_run() -> None:
    sc = _scenario()
    spec = RunSpec(sc.name, "offline", caps=Caps(carbon_kg_by_dc={"nowhere": 10.0}),
                   baseline=False)
    with pytest.raises(ValueError, match="unknown datacenter.*nowhere.*the scenario has a, b"):
        simulate_spec(spec, sc)
    with pytest.raises(SpecError, match="names scenario 'other'"):
        simulate_spec(RunSpec("other", "asap-home"), sc)


@pytest.mark.slow
def test_save_outcome_stores_the_run_with_its_baseline(tmp_path: Path) -> None:
    sc = _scenario()
    out = run_spec(RunSpec(sc.name, "offline"), sc)
    saved = save_outcome(out, tmp_path / "wb.duckdb")
    assert len(saved.run_ids) == 2 and not saved.side_file
    with Store(tmp_path / "wb.duckdb", read_only=True) as store:
        info = store.run_info(saved.run_ids[1])
        assert info["baseline_run_id"] == saved.run_ids[0]
        assert info["bound"]["kind"] == out.bound.kind  # type: ignore[union-attr]
