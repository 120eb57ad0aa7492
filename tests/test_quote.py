"""Quotes: invariants of the options, deadline and occupancy handling, and ``workbench quote``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.cli import main
from workbench.model import Scenario
from workbench.quote import QUOTE_COLUMNS, JobSpec, QuoteError, quote


@pytest.fixture(scope="module")
def spec(seed3: Scenario) -> JobSpec:
    job = next(j for j in seed3.jobs if j.app == "cifar10")
    return JobSpec(app="cifar10", work_samples=job.work_samples, home="guangzhou",
                   min_gpus=1, max_gpus=8, deadline_h=24)


def test_options_are_sorted_and_consistent(seed3: Scenario, spec: JobSpec) -> None:
    q = quote(seed3, spec)
    opts = q.options
    assert tuple(opts.columns) == QUOTE_COLUMNS
    ok = opts[opts["feasible"]]
    assert len(ok) > 0 and q.recommended is not None
    assert q.recommended["score"] == ok["score"].min()
    assert np.all(np.diff(ok["score"].to_numpy()) >= 0)
    # Every feasible option finishes by the deadline and costs no more than starting now.
    deadline = seed3.start + pd.Timedelta(hours=24)
    assert (ok["finish"] <= deadline).all()
    assert (ok["cost"] <= ok["cost_if_now"] + 1e-9).all()
    assert (ok["energy_kwh"] > 0).all() and (ok["carbon_kg"] > 0).all()
    # Only allowed counts: powers of two in the range.
    assert set(opts["n_gpus"]) <= {1, 2, 4, 8}


def test_cost_equals_energy_times_price_for_one_slot_job(seed3: Scenario) -> None:
    tiny = JobSpec(app="cifar10", work_samples=1e5, home="guiyang", min_gpus=1, max_gpus=1,
                   gpu_types=("A100",), deadline_h=1)
    q = quote(seed3, tiny)
    best = q.recommended
    assert best is not None and best["datacenter"] == "guiyang"
    t = seed3.slot_of(best["start"].to_pydatetime())
    price = float(seed3.grid["price_per_kwh"].sel(region="guizhou").values[t])
    assert best["cost"] == pytest.approx(best["energy_kwh"] * price)


def test_carbon_price_shifts_towards_clean_power(seed3: Scenario, spec: JobSpec) -> None:
    cheap = quote(seed3, spec).recommended
    clean = quote(seed3, spec, carbon_price_per_kg=100.0).recommended
    assert cheap is not None and clean is not None
    assert clean["carbon_kg"] <= cheap["carbon_kg"] + 1e-9


def test_impossible_deadline_has_no_recommendation(seed3: Scenario, spec: JobSpec) -> None:
    rushed = JobSpec(app=spec.app, work_samples=spec.work_samples * 1000, home="guangzhou",
                     min_gpus=1, max_gpus=2, deadline_h=1)
    q = quote(seed3, rushed)
    assert q.recommended is None
    assert not q.options["feasible"].any()
    assert any("deadline" in w for w in q.warnings)


def test_work_beyond_any_horizon_is_infeasible_not_a_crash(seed3: Scenario,
                                                             spec: JobSpec) -> None:
    """1e300 samples need more slots than an array holds: every option is infeasible, with
    its energy still the run's (no per-slot weights are built)."""
    huge = JobSpec(app=spec.app, work_samples=1e300, home="guangzhou", min_gpus=1, max_gpus=2)
    q = quote(seed3, huge)
    assert q.recommended is None and not q.options["feasible"].any()
    assert (q.options["energy_kwh"] > 1e200).all()
    assert q.options["note"].str.contains("cannot finish before the deadline").all()


def test_busy_pools_are_avoided(seed3: Scenario, spec: JobSpec) -> None:
    free = quote(seed3, spec).recommended
    assert free is not None
    col = f"gpus_busy:{free['datacenter']}/{free['gpu_type']}"
    pool = next(p for p in seed3.pools
                if (p.datacenter, p.gpu_type) == (free["datacenter"], free["gpu_type"]))
    occupancy = pd.DataFrame({col: np.full(seed3.n_slots, pool.count)})
    busy = quote(seed3, spec, occupancy=occupancy)
    same = busy.options[(busy.options["datacenter"] == free["datacenter"])
                        & (busy.options["gpu_type"] == free["gpu_type"])]
    assert not same["feasible"].any()
    assert busy.recommended is not None


@pytest.mark.parametrize("kwargs, match", [
    ({"home": "atlantis"}, "home"),
    ({"app": "nope"}, "profile"),
])
def test_bad_input_says_what_to_fix(seed3: Scenario, kwargs: dict, match: str) -> None:
    base = {"app": "cifar10", "work_samples": 1e6, "home": "guangzhou"}
    with pytest.raises(QuoteError, match=match):
        quote(seed3, JobSpec(**{**base, **kwargs}))


@pytest.mark.parametrize("arrival, match", [
    ("1999-01-01T00:00Z", r"arrival 1999-01-01T00:00:00\+00:00 is before the horizon start "
     r"2025-07-1\dT\d\d:00:00\+00:00 of scenario 'seed3'; pass an arrival within the horizon"),
    ("2030-01-01T00:00Z", r"arrival 2030-01-01T00:00:00\+00:00 is after the last slot of "
     r"scenario 'seed3'; pass an arrival within the horizon 2025-07-1"),
])
def test_an_arrival_outside_the_horizon_is_refused_with_the_horizon(
        seed3: Scenario, arrival: str, match: str) -> None:
    """`quote --arrival 1999-01-01` was quoted as arriving at the horizon start."""
    from workbench.model import as_utc

    with pytest.raises(QuoteError, match=match):
        quote(seed3, JobSpec(app="cifar10", work_samples=1e6, home="guangzhou",
                             arrival=as_utc(arrival)))
    at_start = quote(seed3, JobSpec(app="cifar10", work_samples=1e6, home="guangzhou",
                                    arrival=seed3.start))
    assert at_start.recommended is not None


def test_cli_quote_refuses_an_arrival_outside_the_horizon(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--db", str(tmp_path / "wb.duckdb"), "quote", "seed3", "--app", "cifar10",
               "--work", "1e6", "--home", "guangzhou", "--arrival", "1999-01-01"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "is before the horizon start" in err, err


def test_spec_validation() -> None:
    with pytest.raises(QuoteError, match="min_gpus"):
        JobSpec(app="cifar10", work_samples=1e6, home="x", min_gpus=4, max_gpus=2)
    with pytest.raises(QuoteError, match="work_samples"):
        JobSpec(app="cifar10", work_samples=0, home="x")
    with pytest.raises(QuoteError, match="checkpoint_gb"):
        JobSpec(app="cifar10", work_samples=1e6, home="x", checkpoint_gb=float("nan"))
    assert JobSpec(app="a", work_samples=1, home="x", min_gpus=3, max_gpus=12).gpu_counts() == (
        3, 4, 8, 12)


def test_cli_quote_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "wb.duckdb"
    rc = main(["--db", str(db), "quote", "seed3", "--app", "cifar10", "--work", "5e8",
               "--home", "guangzhou", "--gpus", "1-4", "--deadline-h", "12", "--json",
               "--top", "3"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recommended"]["feasible"] is True
    assert len(data["options"]) == 3
    assert data["currency"] == "CNY"
    rc = main(["--db", str(db), "quote", "seed3", "--app", "cifar10", "--work", "5e8",
               "--home", "nowhere"])
    assert rc == 2
    # No option meets the deadline: the answer is "no", exit 1 (JSON still printed).
    capsys.readouterr()
    rc = main(["quote", "seed3", "--app", "cifar10", "--work", "5e14", "--home", "guangzhou",
               "--deadline-h", "1", "--json", "--db", str(db)])
    assert rc == 1 and json.loads(capsys.readouterr().out)["recommended"] is None



def test_cli_quote_takes_the_forecast_flags(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``--forecast`` as ``plan`` takes it: the quote says which prices it used, and a noisy
    forecast prices the same options differently from the perfect what-if."""
    db = tmp_path / "wb.duckdb"
    argv = ["--db", str(db), "quote", "seed3", "--app", "cifar10", "--work", "5e8", "--home",
            "guangzhou", "--gpus", "1-4", "--deadline-h", "12", "--json"]
    assert main([*argv, "--forecast", "perfect"]) == 0
    perfect = json.loads(capsys.readouterr().out)
    assert main([*argv, "--forecast", "noisy", "--forecast-error", "0.5"]) == 0
    noisy = json.loads(capsys.readouterr().out)
    assert (perfect["forecast"], noisy["forecast"]) == ("perfect", "noisy")
    assert [o["cost_if_now"] for o in perfect["options"]] != [
        o["cost_if_now"] for o in noisy["options"]]
    assert main(argv[:-1] + ["--forecast", "perfect"]) == 0
    assert "priced against the perfect forecast" in capsys.readouterr().out
    assert main([*argv, "--forecast", "crystal-ball"]) == 2
    assert "invalid choice: 'crystal-ball'" in capsys.readouterr().err


def test_predicted_profiles_carry_a_run_time_interval(seed3: Scenario, spec: JobSpec) -> None:
    from dataclasses import replace

    q = quote(seed3, spec)
    opts = q.options
    assert set(opts["profile"]) == {"predicted"}  # seed3's pools have no measurements
    assert (opts["duration_lo_h"] < opts["duration_h"]).all()
    assert (opts["duration_h"] < opts["duration_hi_h"]).all()
    # a fitted profile (no interval) has a zero-width interval
    fitted = replace(seed3, profiles=tuple(replace(p, step_time_interval=None, derived=False)
                                           for p in seed3.profiles))
    f = quote(fitted, spec).options
    assert set(f["profile"]) == {"fitted"}
    assert np.allclose(f["duration_lo_h"], f["duration_h"])
    assert np.allclose(f["duration_hi_h"], f["duration_h"])
    # an option whose slow end would overrun the deadline says so
    tight = quote(seed3, replace(spec, deadline_h=float(opts["duration_h"].min()) * 1.2 + 1))
    assert tight.options["note"].str.contains("slow end").any()


class _Pinned:
    """Runs the one job on a fixed (datacenter, GPU type, count) from a fixed slot, at the
    batch a policy picks (:func:`workbench.outcome.best_batch`) with the true gradient noise
    scale (the online estimate's only difference from the truth, as in
    ``test_outcome.py::test_prediction_equals_truth_without_noise``)."""

    name = "pinned"

    def __init__(self, datacenter: str, gpu_type: str, n_gpus: int, start_slot: int) -> None:
        self.where = (datacenter, gpu_type, n_gpus)
        self.start_slot = start_slot

    def reset(self, scenario: object) -> None:
        self.view = scenario

    def decide(self, state, forecast):  # type: ignore[no-untyped-def]
        from workbench import outcome
        from workbench.policies.base import Allocation, Placement

        if state.t < self.start_slot or not state.jobs:
            return Allocation(placements={})
        js = state.jobs[0]
        dc, gpu, n = self.where
        prof = state.scenario.profile(js.job.app, gpu)
        gpn = next(p.gpus_per_node for p in state.scenario.pools_at(dc) if p.gpu_type == gpu)
        m, _ = outcome.best_batch(prof, n, gpn, float(prof.efficiency.phi(js.progress)))
        return Allocation(placements={js.job.job_id: Placement(dc, gpu, n, m)})


def test_quote_is_what_the_simulator_charges() -> None:
    """Every feasible option, run alone through the real simulator on its quoted
    datacenter, GPU type, count and start, costs what the quote says: energy, cost, carbon,
    finish time and first batch. The quote prices against the ``perfect`` forecast (the
    truth the simulator charges) and the simulator runs noise-free. The only residual is the
    order of floating-point sums (relative 1e-9)."""
    import dataclasses

    from helpers_sim import SLOT_S, START, tiny_scenario, training

    from workbench.sim import simulate

    job = dataclasses.replace(training("j", slots_of_work=3.3, deadline_slot=20),
                              dataset_gb=1500.0)  # 8 * 1500 / 10 = 1200 s: over a slot
    n_slots = 24
    sc = tiny_scenario([job], n_slots=n_slots,
                       price_a=[1.0, 2.0, 0.4, 0.7, 1.5, 0.3, 0.9, 1.1],
                       price_b=[0.8, 0.2, 1.3, 0.6, 0.5, 1.7, 0.4, 0.9],
                       carbon_a=[600, 450, 700, 300, 500], carbon_b=[200, 650, 350, 400])
    spec = JobSpec(app="toy", work_samples=job.work_samples, home="a", min_gpus=1, max_gpus=2,
                   deadline_h=20 * SLOT_S / 3600.0, arrival=START, checkpoint_gb=1500.0)
    q = quote(sc, spec, forecast_mode="perfect")
    ok = q.options[q.options["feasible"]]
    assert len(ok) == 4  # a and b, 1 and 2 GPUs
    assert ok["note"].str.contains("moves 1500 GB").sum() == 2  # the two options in b
    for opt in ok.to_dict("records"):
        t0 = sc.slot_of(opt["start"].to_pydatetime())
        res = simulate(sc, _Pinned(opt["datacenter"], opt["gpu_type"], opt["n_gpus"], t0),
                       forecast_mode="perfect")
        row = res.jobs.iloc[0]
        where = f"{opt['datacenter']} {opt['n_gpus']}x{opt['gpu_type']} from slot {t0}"
        assert row["finished"] and row["deadline_met"], where
        for col in ("energy_kwh", "cost", "carbon_kg"):
            assert row[col] == pytest.approx(opt[col], rel=1e-9), (where, col)
        assert abs((row["finish_time"] - opt["finish"]).total_seconds()) < 1e-3, where
        assert row["lost_s"] == pytest.approx(120.0 + (1200.0 if opt["datacenter"] == "b"
                                                       else 0.0)), where
        plan = res.plan[res.plan["action"] != "pause"]
        assert int(plan["batch_size"].iloc[0]) == opt["batch_size"], where
        assert plan["batch_size"].nunique() > 1  # the batch follows the noise scale
        assert len(plan) == math.ceil(opt["duration_h"] * 3600 / SLOT_S - 1e-9), where


@pytest.mark.parametrize(("order", "col", "late_col"), [
    ("fastest", "finish", "duration_h"), ("cheapest", "score", "cost_if_now"),
    ("cleanest", "carbon_kg", "carbon_kg_if_now")])
def test_sort_quote_orders_late_options_too(seed3: Scenario, spec: JobSpec, order: str,
                                            col: str, late_col: str) -> None:
    """On-time options first by the order's column; the late ones (no start, no cost) by
    run time, or by what starting now would cost or emit, never by GPU count alone."""
    from workbench.quote import sort_quote

    both = JobSpec(app=spec.app, work_samples=spec.work_samples * 20, home="guangzhou",
                   min_gpus=1, max_gpus=8, deadline_h=24)
    ranked = sort_quote(quote(seed3, both).options, order)
    ok = ranked["feasible"].to_numpy()
    assert ok.any() and not ok.all()
    assert not np.any(np.diff(ok.astype(int)) > 0)  # every on-time option before every late
    assert ranked[ok][col].is_monotonic_increasing
    late = ranked[~ok][late_col].dropna()
    assert len(late) and late.is_monotonic_increasing


def test_cli_quote_order_and_a_readable_late_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--order picks what 'best' means; with no option on time the closest comes first (the
    fastest for --order fastest, not a 1-GPU option); huge numbers never run together;
    times to the minute."""
    db = tmp_path / "wb.duckdb"
    argv = ["--db", str(db), "quote", "seed3", "--app", "cifar10", "--work", "5e8", "--home",
            "guiyang", "--deadline-h", "2", "--top", "3"]
    assert main([*argv, "--order", "fastest", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    first = data["options"][0]
    assert data["order"] == "fastest" and first["n_gpus"] == 8 and not first["feasible"]
    assert main([*argv, "--order", "fastest"]) == 1
    text = capsys.readouterr().out
    assert "the late ones, shortest run first" in text
    assert text.splitlines()[3].split()[1] == f"8x{first['gpu_type']}"
    assert main(["--db", str(db), "quote", "seed3", "--app", "cifar10", "--work", "5e14",
                 "--home", "guiyang", "--deadline-h", "2", "--top", "2"]) == 1
    rows = capsys.readouterr().out.splitlines()[3:5]
    for row in rows:  # datacenter, config, "late", hours, interval, kWh, cost, kg, note...
        cells = row.split()
        assert cells[2] == "late" and cells[3].endswith("e+06") and cells[5].endswith("e+07")
    ok = ["--db", str(db), "quote", "seed3", "--app", "cifar10", "--work", "5e6", "--home",
          "guiyang", "--deadline-h", "24", "--top", "3"]
    for order in ("cheapest", "fastest", "cleanest"):
        assert main([*ok, "--order", order, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        key = {"cheapest": "score", "fastest": "finish", "cleanest": "carbon_kg"}[order]
        assert got["recommended"] == got["options"][0]
        assert [o[key] for o in got["options"]] == sorted(o[key] for o in got["options"])
    assert main(ok) == 0
    text = capsys.readouterr().out
    assert "recommended (lowest cost before the deadline)" in text
    assert ":00+00:00" not in text and ".4" not in text.splitlines()[1].split("finish")[1]
    assert main([*ok, "--order", "soonest"]) == 2


def test_a_power_limit_menu_quotes_the_time_energy_trade_off(seed3: Scenario,
                                                            spec: JobSpec) -> None:
    from workbench import outcome
    from workbench.power_limits import limit_factors

    full = quote(seed3, spec, forecast_mode="perfect").options
    q = quote(seed3, spec, forecast_mode="perfect", power_limits=(1.0, 0.7)).options
    pools = {(p.datacenter, p.gpu_type): p for p in seed3.pools}
    top = q[q["power_limit_w"] == q.apply(
        lambda r: pools[(r["datacenter"], r["gpu_type"])].max_power_w, axis=1)]
    low = q[q["power_limit_w"] < q.apply(
        lambda r: pools[(r["datacenter"], r["gpu_type"])].max_power_w, axis=1)]
    assert len(top) == len(full) and len(low) == len(full)  # each option once more at 0.7
    key = ["datacenter", "gpu_type", "n_gpus"]
    pair = top.merge(low, on=key, suffixes=("", "_lim"))
    assert len(pair) == len(full)
    # Full-power rows are the quote without a menu.
    merged = full.merge(top, on=key, suffixes=("", "_top"))
    np.testing.assert_allclose(merged["energy_kwh"], merged["energy_kwh_top"])
    # At 70 % of the board power: slower, less energy, as the factors say.
    for _, r in pair.iterrows():
        pool = pools[(r["datacenter"], r["gpu_type"])]
        assert r["power_limit_w_lim"] == pytest.approx(0.7 * pool.max_power_w)
        prof = seed3.profile("cifar10", r["gpu_type"])
        _, x = outcome.best_batch(prof, int(r["n_gpus"]), pool.gpus_per_node,
                                  float(prof.efficiency.phi(0.0)))
        per_gpu = float(outcome.training_power_w(prof, int(r["n_gpus"]), x)) / r["n_gpus"]
        r_t, r_p = limit_factors(r["gpu_type"], 0.7, per_gpu, pool.max_power_w)
        assert r["duration_h_lim"] >= r["duration_h"] - 1e-9
        if r_t > 1.0 + 1e-6:
            assert r["duration_h_lim"] > r["duration_h"]
        # Energy: the same work at r_t the time and r_P the IT power.
        assert (r["energy_kwh_lim"] < r["energy_kwh"]) == (r_t * r_p < 1.0 - 1e-6) or abs(
            r_t * r_p - 1.0) < 1e-3
    assert (pair["energy_kwh_lim"] < pair["energy_kwh"]).any()
    with pytest.raises(QuoteError, match=r"power limits: .*\[0.4, 1\]"):
        quote(seed3, spec, power_limits=(0.1,))


def test_cli_quote_power_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "wb.duckdb"
    argv = ["--db", str(db), "quote", "seed3", "--app", "cifar10", "--work", "5e8", "--home",
            "guangzhou", "--gpus", "1-2", "--deadline-h", "12", "--top", "100"]
    assert main([*argv, "--json", "--power-limits", "0.7"]) == 0
    data = json.loads(capsys.readouterr().out)
    limits = {o["power_limit_w"] for o in data["options"]}
    assert len(limits) > 1 and all(w > 0 for w in limits)
    assert main([*argv, "--power-limits", "0.7"]) == 0
    assert "@" in capsys.readouterr().out  # the limited rows name their limit: 2xA100@280W
    assert main([*argv, "--power-limits", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--power-limits '0.1'" in err
