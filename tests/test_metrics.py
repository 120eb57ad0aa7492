"""Run metrics on hand-built plans and on simulated runs."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from helpers_sim import SLOT_S, START, tiny_scenario, training

from workbench.forecast import default_forecast_mode
from workbench.metrics import METRIC_KEYS, compute_metrics, peak_mask
from workbench.policies.baselines import AsapHome
from workbench.sim import simulate


def row(slot: int, job: str, region: str, n: int, energy: float, action: str = "run",
        home: str = "a", price: float = 1.0) -> dict:
    t = pd.Timestamp(START) + pd.Timedelta(seconds=SLOT_S * slot)
    return {
        "slot_start": t, "slot_end": t + pd.Timedelta(seconds=SLOT_S), "job_id": job,
        "region": region, "gpu_type": "A100" if n else "", "n_gpus": n, "batch_size": 128,
        "action": action, "energy_kwh": energy, "cost": energy * price,
        "carbon_kg": energy * 0.5, "price_per_kwh": price, "carbon_g_per_kwh": 500.0,
        "progress": 0.5 if n else 0.0, "slot": slot, "home": home,
        "used_s": SLOT_S / 2 if action == "finish" else SLOT_S,
    }


def test_peak_mask_marks_slots_above_the_daily_median() -> None:
    sc = tiny_scenario(n_slots=4, price_a=[1.0, 3.0, 2.0, 2.0], price_b=[5.0])
    mask = peak_mask(sc)
    assert mask["ra"].tolist() == [False, True, False, False]
    assert not mask["rb"].any()  # a flat price has no peak


def test_hand_plan_metrics() -> None:
    jobs = [training("j", deadline_slot=1), training("k", home="b", deadline_slot=8)]
    sc = tiny_scenario(jobs, n_slots=4, price_a=[1.0, 3.0, 2.0, 2.0])
    plan = pd.DataFrame([
        row(0, "j", "a", 2, 1.0),
        row(1, "j", "a", 2, 2.0, action="finish"),  # finishes at 1.5 slots: after deadline
        row(0, "k", "b", 0, 0.0, action="pause", home="b"),
        row(1, "k", "a", 1, 4.0, home="b"),
        row(2, "k", "a", 1, 8.0, action="finish", home="b"),
    ])
    mig = pd.DataFrame([{"slot_start": plan.loc[3, "slot_start"], "job_id": "k",
                         "from_region": "b", "to_region": "a", "checkpoint_gb": 2.0,
                         "transfer_s": 1.6, "expected_gain": 1.0, "reason": ""}])
    m = compute_metrics({"plan": plan, "migrations": mig}, sc)
    assert m["energy_kwh"] == pytest.approx(15.0)
    assert m["carbon_kg"] == pytest.approx(7.5)
    assert m["currency"] == "CNY"
    assert m["energy_moved_kwh"] == pytest.approx(12.0)
    assert m["energy_peak_kwh"] == pytest.approx(2.0 + 4.0)  # slot 1 is a's peak
    assert m["energy_offpeak_kwh"] == pytest.approx(9.0)
    assert m["jobs_finished"] == 2 and m["jobs_total"] == 2
    assert m["deadline_misses"] == 1
    assert m["mean_jct_h"] == pytest.approx((1.5 + 2.5) / 2 * SLOT_S / 3600)
    assert m["migrations"] == 1 and m["migration_gb"] == pytest.approx(2.0)
    # pool a: 2 + 2 + 1 + 1 busy GPU-slots of 4 GPUs x 4 slots
    assert m["gpu_utilisation:a/A100"] == pytest.approx(6 / 16)
    assert m["gpu_utilisation"] == pytest.approx(6 / 32)
    assert set(METRIC_KEYS) <= set(m)


def test_metrics_from_frames_equal_metrics_of_the_run() -> None:
    jobs = [training("j", slots_of_work=1.5, deadline_slot=6),
            training("k", home="b", arrival_slot=1, slots_of_work=30.0, deadline_slot=3)]
    sc = tiny_scenario(jobs, n_slots=6)
    res = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc))
    again = compute_metrics({"plan": res.plan, "migrations": res.migrations,
                             "slots": res.slots, "jobs": res.jobs}, sc)
    assert again == pytest.approx(res.metrics, nan_ok=True)
    plan_only = compute_metrics({"plan": res.plan, "migrations": res.migrations}, sc)
    for key in ("energy_kwh", "cost", "carbon_kg", "jobs_finished", "deadline_misses",
                "mean_jct_h", "p95_jct_h"):
        assert plan_only[key] == pytest.approx(res.metrics[key]), key
    assert res.metrics["deadline_misses"] == 1
    assert res.metrics["jobs_unfinished"] == 1
    assert res.metrics["jobs_waiting_mean"] == 0.0
    assert res.metrics["solve_s_mean"] == 0.0  # asap-home solves nothing
    assert not math.isnan(res.metrics["decide_s_max"])


def test_site_idle_power_is_metered_and_billed_not_dropped() -> None:
    """A datacenter's idle_power_kw is on its meter under every policy: in the bill, in the
    no-jobs bill, and so not in the plan's part of it."""
    import dataclasses

    from workbench.runner import RunSpec, simulate_spec

    sc = tiny_scenario([training("j", home="b", deadline_slot=4)], n_slots=4,
                       price_a=[1.0, 3.0, 2.0, 2.0])
    a, b = sc.datacenters
    sc = dataclasses.replace(sc, datacenters=(dataclasses.replace(a, idle_power_kw=10.0), b))
    res, _ = simulate_spec(RunSpec(sc.name, "asap-home", baseline=False), sc)
    m = res.metrics
    slot_h = SLOT_S / 3600
    # 10 kW x PUE 1.5 over 4 slots, at prices 1, 3, 2, 2 and 600 g/kWh; b has no idle power.
    assert m["bill_no_jobs_total"] == pytest.approx(10 * 1.5 * slot_h * 8.0)
    assert m["no_jobs_carbon_kg"] == pytest.approx(10 * 1.5 * slot_h * 4 * 0.6)
    assert m["cost"] == pytest.approx(m["bill_total"] - m["bill_no_jobs_total"])
    # The job ran at b alone: the plan's part is its energy at b's price.
    assert m["cost"] == pytest.approx(float((res.plan["energy_kwh"] * 0.5).sum()))
    assert m["cost"] == pytest.approx(float(res.plan["cost"].sum()))
    assert m["energy_kwh"] == pytest.approx(float(res.plan["energy_kwh"].sum()))


@pytest.mark.parametrize("jobs", [[], [training("j", deadline_slot=2)]])
def test_plan_without_finish_rows_and_without_jobs_frame(jobs) -> None:
    """A plan read back from CSV in which no training job finished (crashed on a scenario
    without training jobs)."""
    sc = tiny_scenario(jobs, n_slots=4)
    m = compute_metrics({"plan": pd.DataFrame([row(0, "j", "a", 1, 1.0)])}, sc)
    assert m["jobs_finished"] == 0 and math.isnan(m["mean_jct_h"])
    assert m["deadline_misses"] == len(jobs)


def test_round_trips_count_moves_that_undo_the_previous_one() -> None:
    import pandas as pd

    from workbench.metrics import round_trips

    t = pd.date_range("2024-01-01", periods=6, freq="15min", tz="UTC")
    mig = pd.DataFrame({
        "slot_start": t,
        "job_id": ["j1", "j1", "j1", "j2", "j2", "j1"],
        "from_region": ["a", "b", "a", "a", "b", "b"],
        "to_region": ["b", "a", "b", "b", "c", "c"],
        "checkpoint_gb": [1.0] * 6,
    })
    # j1: a->b, b->a (1), a->b (2), b->c (not a return); j2: a->b, b->c (none).
    assert round_trips(mig) == 2
    assert round_trips(mig.iloc[:0]) == 0 and round_trips(None) == 0
def _check_adds_up(result, base, sc) -> dict:  # type: ignore[no-untyped-def]
    from workbench.metrics import ATTRIBUTION_KEYS, attribute_savings

    att = attribute_savings(result, base, sc)
    assert set(att) == {"cost", "carbon_kg"}
    for key in ("cost", "carbon_kg"):
        assert set(att[key]) == set(ATTRIBUTION_KEYS)
        saving = base.metrics[key] - result.metrics[key]
        assert sum(att[key].values()) == pytest.approx(saving, rel=1e-9, abs=1e-9)
        assert att[key]["movement"] <= 1e-12  # moving and restarting never saves
    return att


def test_attribution_adds_up_exactly_on_a_hand_case() -> None:
    from workbench.metrics import attribute_savings

    # Baseline: 2 kWh at home at 1.0. Plan: 1 kWh in b at 0.5 (home price 1.0 then), plus
    # 0.1 kWh of movement at 0.5: efficiency 1.0, temporal 0, spatial 0.5, movement -0.05.
    sc = tiny_scenario(n_slots=2)
    base = {"plan": pd.DataFrame([row(0, "j", "a", 1, 2.0)])}
    plan = pd.DataFrame([row(0, "j", "b", 1, 1.1, price=0.5)]).assign(movement_kwh=0.1)
    att = attribute_savings({"plan": plan}, base, sc)["cost"]
    assert att == pytest.approx({"efficiency": 1.0, "temporal": 0.0, "spatial": 0.5,
                                 "movement": -0.05})


def test_attribution_adds_up_on_seed3(seed3) -> None:  # type: ignore[no-untyped-def]
    from workbench.policies.greedy import GreedyPolicy
    from workbench.scenarios import first_hours

    sc = first_hours(seed3, 12)
    base = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc))
    plan = simulate(sc, GreedyPolicy(), forecast_mode=default_forecast_mode(sc))
    att = _check_adds_up(plan, base, sc)
    assert att["cost"]["efficiency"] > 0  # the ECU-best configuration uses less energy


@pytest.mark.shared_data
@pytest.mark.slow
def test_attribution_adds_up_on_a_real_grid(shared_data, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from workbench.build import build_and_save
    from workbench.io.grid import import_grid
    from workbench.io.jobs import import_jobs
    from workbench.policies.greedy import GreedyPolicy
    from workbench.scenarios import first_hours
    from workbench.store import Store

    repo = Path(__file__).resolve().parents[1]
    sc_dir = shared_data / "grid/sustain-cluster"
    with Store(tmp_path / "real.duckdb") as store:
        for z in ("US-CAL-CISO", "US-TEX-ERCO", "US-MIDA-PJM", "DE-LU"):
            import_grid(store, "electricitymaps-csv",
                        sc_dir / f"carbon/{z}/{z}_2023_hourly.csv", z)
            import_grid(store, "price-csv",
                        sc_dir / f"prices/{z}/{z}_electricity_prices_2023.csv", z)
        import_jobs(store, "pollux-workload",
                    shared_data / "jobs/pollux/workloads/workload-6.csv", "pollux-w6")
        # The shipped example, with its latency matrix read from this shared-data folder.
        cfg = (repo / "examples/real_grid.toml").read_text().replace(
            "../../shared/data", str(shared_data))
        (tmp_path / "real_grid.toml").write_text(cfg)
        sc = first_hours(build_and_save(store, tmp_path / "real_grid.toml"), 24)
    base = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc))
    plan = simulate(sc, GreedyPolicy(), forecast_mode=default_forecast_mode(sc))
    # Market prices with 28+ days of history before the start: the backtested model
    # forecast, not foresight.
    assert plan.meta["forecast_mode"] == "model"
    _check_adds_up(plan, base, sc)
