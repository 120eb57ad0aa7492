"""GPU power limits: the model fitted on Zeus (validated leave-one-limit-out), its factors,
the power-limit options of a slot and what the simulator charges a limited run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers_sim import START, tiny_scenario, training

from workbench.policies.base import Allocation, Placement, SlotState, slot_options
from workbench.power_limits import (
    MIN_FRACTION,
    POOLED,
    check_menu,
    fit_zeus,
    leave_one_limit_out,
    limit_factors,
    model_for,
    read_zeus_limits,
    shipped_models,
)
from workbench.runner import RunSpec, SpecError, simulate_spec

ZEUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "profiles" / "zeus"


def test_full_power_is_exactly_unlimited_and_lower_limits_trade_time_for_energy() -> None:
    assert limit_factors("A100", 1.0, 250.0, 400.0) == (1.0, 1.0)
    last_t, last_p = 1.0, 1.0
    for f in (0.9, 0.8, 0.7, 0.6, 0.5, MIN_FRACTION):
        r_t, r_p = limit_factors("A100", f, 300.0, 400.0)
        assert r_t >= last_t and r_p <= last_p   # slower and lower, monotonically
        assert r_p <= f * 400.0 / 300.0 + 1e-12   # an average power under its cap
        last_t, last_p = r_t, r_p
    # Near the job's own draw a limit saves energy per unit of work.
    r_t, r_p = limit_factors("V100", 0.75, 230.0, 300.0)
    assert r_t * r_p < 0.97 and r_t < 1.1
    # A limit far above what the job draws changes (almost) nothing.
    r_t, r_p = limit_factors("V100", 0.95, 120.0, 300.0)
    assert r_t == pytest.approx(1.0, abs=1e-3) and r_p == pytest.approx(1.0, abs=1e-3)


def test_unmeasured_gpus_use_the_pooled_fit_with_an_interval() -> None:
    models = shipped_models()
    assert {"a40", "p100", "rtx6000", "v100", POOLED} <= set(models)
    assert model_for("H800") is models[POOLED] and model_for("V100") is models["v100"]
    lo, hi = models[POOLED].time_interval
    assert lo < 1.0 < hi
    lo, hi = models[POOLED].power_interval
    assert lo < 1.0 < hi


def test_menus_are_checked() -> None:
    assert check_menu([0.7, 0.85]) == (1.0, 0.85, 0.7)
    with pytest.raises(ValueError, match=r"in \[0.4, 1\]"):
        check_menu([0.2])
    with pytest.raises(SpecError, match=r"in \[0.4, 1\]"):
        RunSpec("tiny", power_limits=(1.3,))


@pytest.mark.shared_data
def test_leave_one_limit_out_error_is_at_most_ten_percent_on_every_zeus_gpu() -> None:
    if not ZEUS.is_dir():
        pytest.skip("../shared/data/profiles/zeus is absent")
    for gpu in ("a40", "p100", "rtx6000", "v100"):
        rows = read_zeus_limits(ZEUS / f"summary_power_{gpu}.csv")
        cv = leave_one_limit_out(rows)
        rt = np.concatenate([np.asarray(v) for v in cv["time_ratio"]])
        rp = np.concatenate([np.asarray(v) for v in cv["power_ratio"]])
        assert np.median(np.abs(rt - 1)) <= 0.10, gpu
        assert np.median(np.abs(rp - 1)) <= 0.10, gpu


@pytest.mark.shared_data
@pytest.mark.slow
def test_the_shipped_fits_are_the_fits_of_the_shared_data() -> None:
    if not ZEUS.is_dir():
        pytest.skip("../shared/data/profiles/zeus is absent")
    fitted = fit_zeus(ZEUS)
    shipped = shipped_models()
    for key, m in fitted.items():
        for name in ("c", "k", "a", "b"):
            # least squares stops at its own tolerance (ftol 1e-8): where the loss is flat
            # the parameter it stops at moves by ~1e-6 with the machine's BLAS (CI saw
            # 1.4451838 against the shipped 1.4451803); 1e-4 is still the same fit
            assert getattr(m.params, name) == pytest.approx(
                getattr(shipped[key].params, name), rel=1e-4)


def _state(sc, menu):  # noqa: ANN001, ANN202
    from workbench.sim.loop import _job_runs

    view = sc.view(power_limits=menu)
    runs = _job_runs(sc, 0.0, 0, 0.1)
    return SlotState(scenario=view, t=0, time=START, jobs=tuple(r.state(START) for r in runs))


def test_slot_options_offer_the_menus_most_efficient_limit_through_the_one_slot_model(
) -> None:
    sc = tiny_scenario([training("j", slots_of_work=4.0, gpus=2, counts=(2,))])
    price, carbon = {"ra": 1.0, "rb": 0.5}, {"ra": 600.0, "rb": 300.0}
    plain = slot_options(_state(sc, ()), price, carbon)
    menu = slot_options(_state(sc, (1.0, 0.8, 0.6)), price, carbon)
    # The menu pruned per job and slot: full power and the limit of least energy per work.
    assert len(menu) == 2 * len(plain) and not plain.power_limit_w.size
    full = np.isnan(menu.power_limit_w)
    np.testing.assert_array_equal(menu.progress[full], plain.progress)
    np.testing.assert_array_equal(menu.cost[full], plain.cost)
    for k in np.flatnonzero(~full):
        base = k - 1
        limit_w = float(menu.power_limit_w[k])
        assert limit_w in (320.0, 240.0)
        assert menu.progress[k] < menu.progress[base]
        assert menu.power_kw[k] < menu.power_kw[base]
        assert menu.cost[k] < menu.cost[base]
        assert menu.placement(int(k)).power_limit_w == limit_w
    # The kept limit does the work on the least energy of the menu's limits, each offered
    # alone beside full power.
    alone = {f: slot_options(_state(sc, (1.0, f)), price, carbon) for f in (0.8, 0.6)}
    per_work = {f: o.power_kw[1::2] / o.progress[1::2] for f, o in alone.items()}
    best = np.where(per_work[0.8] <= per_work[0.6], 320.0, 240.0)
    np.testing.assert_array_equal(menu.power_limit_w[~full], best)
    # Rows of a job stay together, each full-power row followed by its limited row.
    assert (np.diff(menu.job_index) >= 0).all()


class _Fixed:
    """Runs job j on 2 GPUs in a at a fixed power limit every slot."""

    name = "fixed"

    def __init__(self, limit_w: float | None) -> None:
        self.limit_w = limit_w

    def hindsight_bound(self):  # noqa: ANN201
        return None

    def reset(self, scenario) -> None:  # noqa: ANN001
        pass

    def decide(self, state, forecast) -> Allocation:  # noqa: ANN001
        return Allocation(placements={js.job.job_id: Placement("a", "A100", 2, 128,
                                                               self.limit_w)
                                      for js in state.jobs})


def test_a_limited_run_is_slower_uses_less_energy_and_says_which_limit() -> None:
    from workbench.sim import simulate

    sc = tiny_scenario([training("j", slots_of_work=3.0, gpus=2, counts=(2,))], n_slots=12)
    full = simulate(sc, _Fixed(None), forecast_mode="perfect")
    low = simulate(sc, _Fixed(240.0), forecast_mode="perfect")
    run_f = full.plan[full.plan["n_gpus"] > 0]
    run_l = low.plan[low.plan["n_gpus"] > 0]
    assert (run_f["power_limit_w"] == 400.0).all() and (run_l["power_limit_w"] == 240.0).all()
    assert run_l["used_s"].sum() > run_f["used_s"].sum()
    assert low.metrics["energy_kwh"] < full.metrics["energy_kwh"]
    assert low.metrics["jobs_finished"] == full.metrics["jobs_finished"] == 1
    assert low.metrics["power_limited_share"] == 1.0 and full.metrics["power_limited_share"] == 0
    # The energy saved against full power, row by row: what the attribution counts.
    assert low.metrics["limit_saved_kwh"] == pytest.approx(
        full.metrics["energy_kwh"] - low.metrics["energy_kwh"], rel=0.05)
    assert full.metrics["limit_saved_kwh"] == 0.0


def test_the_power_limit_menu_is_ignored_on_request() -> None:
    sc = tiny_scenario([training("j", slots_of_work=3.0, gpus=2, deadline_slot=8)], n_slots=8,
                       price_a=[1.0] * 8)
    menu = (1.0, 0.7, 0.5)
    ran, _ = simulate_spec(RunSpec("tiny", "lookahead", baseline=False, power_limits=menu), sc)
    blind, _ = simulate_spec(RunSpec("tiny", "lookahead", baseline=False, power_limits=menu,
                                     ignore=frozenset({"power-limits"})), sc)
    assert blind.meta["ignore"] == ["power-limits"]
    rows = blind.plan[blind.plan["n_gpus"] > 0]
    assert (rows["power_limit_w"] == 400.0).all()
    assert ran.meta["power_limits"] == list(menu)


@pytest.mark.slow
@pytest.mark.shared_data
def test_fit_power_limits_cli_reports_the_validation_and_writes_the_fits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from workbench.cli import main

    if not ZEUS.is_dir():
        pytest.skip("../shared/data/profiles/zeus is absent")
    out = tmp_path / "fits.json"
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "fit", "power-limits", "--profiles", str(ZEUS), "--out",
                 str(out)]) == 0
    text = capsys.readouterr().out
    assert "leave-one-limit-out median error" in text and "v100" in text and str(out) in text
    doc = json.loads(out.read_text())
    assert {"a40", "p100", "rtx6000", "v100", POOLED} <= set(doc)
    assert main(["--db", db, "fit", "power-limits", "--profiles", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_default_menu_reaches_the_run_its_comparisons_and_the_app() -> None:
    """Power limits are in the default: a spec carries the default menu, its comparisons
    share the run's menu (none for a full-power run), and the app's toggle hands it to the
    run, keys comparisons by it and restores it from a stored run."""
    from workbench.app.knobs import restored_knobs
    from workbench.app.state import WorkbenchState
    from workbench.power_limits import DEFAULT_MENU
    from workbench.scenarios import build_seed3

    spec = RunSpec("seed3")
    assert spec.power_limits == DEFAULT_MENU
    assert spec.comparison("greedy").power_limits == DEFAULT_MENU
    assert RunSpec("seed3", power_limits=()).comparison("greedy").power_limits == ()
    state = WorkbenchState(db_path="none.duckdb")
    assert state.power_limits is True
    state.power_limits = False
    assert state.run_spec(build_seed3()).power_limits == ()
    info = {"policy": "lookahead", "knobs": "{}", "settings": '{"power_limits": []}'}
    assert restored_knobs(info, ["lookahead"], [])["power_limits"] is False
    info["settings"] = '{"power_limits": [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]}'
    assert restored_knobs(info, ["lookahead"], [])["power_limits"] is True
    info["settings"] = '{"power_limits": [1.0, 0.7]}'  # a menu the toggle cannot show
    assert "power_limits" not in restored_knobs(info, ["lookahead"], [])
