"""The site meter and the one bill: the meter balances in every site-slot, the bill's parts
add up, the plan rows' shares add up to the part of the bill the plan controls, power caps
are on grid import, and every face shows the same bill and saving for one stored run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers_sim import SLOT_S, inference, tiny_scenario, training
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.bill import BILL_PARTS, metered_bills
from workbench.caps import Caps
from workbench.cli import main
from workbench.meter import Meter, check_import_caps, idle_kw, job_power_caps_kw
from workbench.runner import RunSpec, SpecError, run_spec, simulate_spec
from workbench.schema import site_key
from workbench.sim.truth import horizon_cube
from workbench.store import Store
from workbench.supply import Battery, DemandCharge, DemandStructure, Source, Supply

H = SLOT_S / 3600.0
SUN = np.array([0, 0, 1, 3, 4, 3, 1, 0, 0, 0, 0, 0], dtype=float)


def _sited(idle_a: float = 2.0, idle_b: float = 1.0, export: float | None = None,
           jobs: tuple = ()) -> object:
    """The two-site tiny scenario with idle loads, solar and a battery at ``a``, a demand
    charge at ``b`` (and an export price at ``a`` when given)."""
    sc = tiny_scenario(list(jobs), n_slots=12)
    a, b = sc.datacenters
    return dataclasses.replace(
        sc, name="metered",
        datacenters=(dataclasses.replace(a, idle_power_kw=idle_a),
                     dataclasses.replace(b, idle_power_kw=idle_b)),
        supply=Supply(sources=(Source("pv", "a", "solar", 4.0, SUN, price_per_kwh=0.05,
                                      take_or_pay=True, export_price_per_kwh=export),),
                      batteries=(Battery("bat", "a", 2.0, 1.0),),
                      demand_charges=(DemandCharge("d", "b", (DemandStructure.flat(10.0),),
                                                   capacity_kva=50.0,
                                                   price_per_kva_month=2.0),)))


def _meter(sc) -> Meter:  # noqa: ANN001 - a Scenario
    cube = horizon_cube(sc)
    return Meter(sc, np.asarray(cube["price_per_kwh"].values, dtype=float),
                 np.asarray(cube["carbon_g_per_kwh"].values, dtype=float),
                 {str(r): i for i, r in enumerate(cube["region"].values)})


@settings(max_examples=15, deadline=None)
@given(jobs=st.lists(st.tuples(st.floats(0, 3), st.floats(0, 3)), min_size=12, max_size=12),
       battery=st.lists(st.one_of(st.none(), st.floats(-2, 2)), min_size=12, max_size=12),
       idle=st.floats(0, 3), export=st.one_of(st.none(), st.floats(0, 0.3)))
def test_the_meter_balances_and_the_bill_parts_add_up(jobs, battery, idle, export) -> None:
    sc = _sited(idle_a=idle, export=export)
    meter = _meter(sc)
    idle_kwh = dict(zip(("a", "b"), (idle_kw(sc) * H).tolist(), strict=True))
    shared = 0.0
    records = []
    for t, ((ka, kb), bat) in enumerate(zip(jobs, battery, strict=True)):
        # The rows' energy at the grid's price and carbon (what the simulator sums row by row).
        drawn = {n: (n, k, k * float(meter.price[t, meter.region[n]]),
                     k * float(meter.carbon[t, meter.region[n]]) / 1000.0)
                 for n, k in (("a", ka), ("b", kb))}
        slot = meter.read(t, {"a": ka, "b": kb}, {} if bat is None else {"a": bat},
                          {n: (d[2], d[3]) for n, d in drawn.items()})
        for name, s in slot.sites.items():
            # Where the energy came from is where it went.
            assert s.renewable_kwh + s.discharge_kwh + s.grid_kwh == pytest.approx(
                s.load_kwh + s.charge_kwh, abs=1e-9)
            assert s.grid_kwh >= 0 and s.load_kwh >= idle_kwh[name] - 1e-12
            assert s.energy_charge == pytest.approx(s.grid_charge + s.ppa_charge
                                                    - s.export_credit, abs=1e-12)
            assert slot.no_jobs[name].load_kwh == pytest.approx(idle_kwh[name])
        shared += sum(c for c, _ in meter.shares(slot, [[drawn["a"]], [drawn["b"]]]))
        records.append({"time": sc.start, **meter.columns(t, slot)})
    bill, none = metered_bills(sc, pd.DataFrame(records))
    for b in (bill, none):
        parts = b.as_dict()
        assert b.total == pytest.approx(sum(-parts[p] if p == "export_credit" else parts[p]
                                            for p in BILL_PARTS), abs=1e-9)
        assert b.part("capacity") > 0  # the fixed charge is on both, so not controllable
    # The rows' shares add up to the part of the bill the plan controls (what is left
    # unattributed waits for a slot with job energy).
    assert shared + meter.unattributed == pytest.approx(bill.total - none.total, abs=1e-9)


def test_a_simulated_run_is_billed_from_its_meter_and_its_rows_add_up() -> None:
    jobs = tuple(training(f"j{i}", home="a", arrival_slot=i, slots_of_work=2.0,
                          deadline_slot=12) for i in range(3)) + (
        inference("svc", home="b", last=12),)
    sc = _sited(export=0.02, jobs=jobs)
    for policy in ("asap-home", "lookahead"):
        res, _ = simulate_spec(RunSpec(sc.name, policy, baseline=False), sc)
        m, s = res.metrics, res.slots
        bill, none = metered_bills(sc, s)
        assert m["bill_total"] == pytest.approx(bill.total)
        assert m["bill_no_jobs_total"] == pytest.approx(none.total)
        assert m["cost"] == pytest.approx(m["bill_total"] - m["bill_no_jobs_total"])
        assert float(res.plan["cost"].sum()) + m["bill_unattributed"] == pytest.approx(
            m["cost"])
        assert float(res.jobs["cost"].sum()) == pytest.approx(float(res.plan["cost"].sum()))
        assert m["carbon_kg"] == pytest.approx(m["site_carbon_kg"] - m["no_jobs_carbon_kg"])
        for d in ("a", "b"):
            load = s[site_key("load_kw", d)]
            assert (load >= idle_kw(sc)[0 if d == "a" else 1] - 1e-9).all()
            assert float(s[site_key("grid_charge", d)].sum()) == pytest.approx(
                m[f"bill_energy:{d}"])


def test_power_caps_are_on_grid_import_and_refused_below_the_idle_load() -> None:
    jobs = tuple(training(f"j{i}", home="b", slots_of_work=3.0, deadline_slot=12,
                          counts=(1, 2, 4)) for i in range(3))
    sc = _sited(idle_b=1.0, jobs=jobs)
    idle_b = float(idle_kw(sc)[1])
    with pytest.raises(ValueError, match=r"below its idle load 1\.20 kW"):
        check_import_caps(sc, Caps(power_kw_by_dc={"b": 1.0}))
    with pytest.raises(SpecError, match="idle load"):
        run_spec(RunSpec(sc.name, "lookahead", caps=Caps(power_kw_by_dc={"b": 1.0})), sc)
    cap = idle_b + 0.6
    assert job_power_caps_kw(sc, Caps(power_kw_by_dc={"b": cap}))[1] == pytest.approx(0.6)
    for policy in ("lookahead", "lyapunov"):
        res, _ = simulate_spec(RunSpec(sc.name, policy, baseline=False,
                                       caps=Caps(power_kw_by_dc={"b": cap})), sc)
        grid_kw = res.slots[site_key("grid_import_kw", "b")]
        assert grid_kw.max() <= cap * (1 + 1e-6), policy
        assert res.metrics["power_cap_violations"] == 0
        assert res.metrics["deadline_misses"] >= 0


def _stored_scenario(tmp_path: Path) -> Path:
    jobs = tuple(training(f"j{i}", home="a", arrival_slot=i, slots_of_work=2.0,
                          deadline_slot=12) for i in range(3)) + (
        inference("svc", home="b", last=12),)
    sc = _sited(export=0.02, jobs=jobs)
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(sc)
    return db


def test_every_face_shows_the_same_bill_and_saving(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from workbench import runs as runs_mod
    from workbench.app import derive
    from workbench.io.plan_csv import read_plan_csv

    db, out = _stored_scenario(tmp_path), tmp_path
    base = ["--db", str(db)]
    argv = [*base, "plan", "--scenario", "metered", "--no-progress", "--json",
            "--out", str(out / "plan.csv"), "--jobs-out", str(out / "jobs.csv"),
            "--sites-out", str(out / "sites.csv")]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    bill, lfl = plan["bill"], plan["like_for_like"]
    assert set(bill) == {*BILL_PARTS, "total", "no_jobs_total"}
    assert plan["cost"] == pytest.approx(bill["total"] - bill["no_jobs_total"])
    assert set(plan["baseline"]["bill"]) == set(bill)
    # The saving is one amount: of the whole bill and of the plan's part on equal work.
    saving = plan["baseline"]["equal_work_cost"] - plan["equal_work_cost"]
    assert lfl["saving"] == pytest.approx(saving)
    assert lfl["jobs_saving_pct"] == pytest.approx(
        100 * saving / plan["baseline"]["equal_work_cost"])
    assert lfl["saving_pct"] == pytest.approx(
        100 * saving / (plan["baseline"]["bill"]["total"]
                        + plan["baseline"]["unfinished_charge"]))
    # The sites CSV sums to the bill's energy-priced parts; the plan and jobs CSVs' cost to
    # the plan's part.
    sites = pd.read_csv(out / "sites.csv")
    assert len(sites) == 2 * 12 and list(sites["datacenter"][:2]) == ["a", "b"]
    assert sites["grid_charge"].sum() == pytest.approx(bill["energy"], rel=1e-6)
    assert sites["ppa_charge"].sum() == pytest.approx(bill["ppa"], rel=1e-6)
    assert sites["export_credit"].sum() == pytest.approx(bill["export_credit"], rel=1e-6)
    assert (sites["load_kw"] >= sites["datacenter"].map({"a": 2.0 * 1.5, "b": 1.2}) - 1e-6).all()
    assert read_plan_csv(out / "plan.csv")["cost"].astype(float).sum() == pytest.approx(
        plan["cost"], rel=1e-6)
    assert pd.read_csv(out / "jobs.csv")["cost"].sum() == pytest.approx(plan["cost"], rel=1e-6)
    # runs show (text and JSON), runs compare, runs export: the same figures.
    assert main([*base, "runs", "show", "latest", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["bill"] == pytest.approx(bill)
    assert shown["like_for_like"]["saving_pct"] == pytest.approx(lfl["saving_pct"])
    assert shown["like_for_like"]["jobs_saving_pct"] == pytest.approx(lfl["jobs_saving_pct"])
    assert main([*base, "runs", "show", "latest"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"= {bill['total']:,.2f}" in text
    assert f"{lfl['saving_pct']:.1f}% of the bill and {lfl['jobs_saving_pct']:.1f}%" in text
    assert main([*base, "runs", "export", "latest", "--out", str(out / "p2.csv"),
                 "--sites-out", str(out / "s2.csv")]) == 0
    capsys.readouterr()
    pd.testing.assert_frame_equal(pd.read_csv(out / "s2.csv"), sites)
    assert main([*base, "runs", "compare", "latest", "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert json.dumps(compared).count(f"{bill['total']}") >= 1
    # The app reads the same stored metrics.
    with Store(db, read_only=True) as store:
        rid = store.resolve_run("latest")
        sc = runs_mod.run_scenario_of(store, rid)
        res = runs_mod.load_result(store, rid, sc)
        table = derive.bill_table(res.metrics, ["a", "b"], "CNY")
        assert table.set_index("datacenter").loc["all", "total (CNY)"] == pytest.approx(
            bill["total"])
        base_id = runs_mod.reference_run(store, {**store.run_info(rid), "run_id": rid})
        base_m = runs_mod.stored_metrics(store, base_id, sc)
    row = derive.compare_table("lookahead", res.metrics, {"asap-home": base_m}).iloc[0]
    assert row["saving_pct"] == pytest.approx(lfl["saving_pct"])
    assert row["jobs_saving_pct"] == pytest.approx(lfl["jobs_saving_pct"])
    assert row["bill_total"] == pytest.approx(bill["total"])


def test_a_run_stored_before_the_meter_is_billed_again_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from workbench import runs as runs_mod

    db = _stored_scenario(tmp_path)
    assert main(["--db", str(db), "plan", "--scenario", "metered", "--no-progress",
                 "--json", "--no-baseline"]) == 0
    now = json.loads(capsys.readouterr().out)
    with Store(db) as store:
        rid = store.resolve_run("latest")
        # What an earlier version stored: no meter columns in the slot records, no bill.
        slots = store.run_slots(rid)
        old = slots.drop(columns=[c for c in slots if c.startswith("site:")])
        for d in ("a", "b"):  # the battery flows it kept, under their old names
            for col in ("charge_kwh", "discharge_kwh"):
                old[f"{col}:{d}"] = slots[site_key(col, d)]
        store.con.execute("DELETE FROM slot_rows WHERE run_id = ?", [rid])
        for i, rec in enumerate(old.to_json(orient="records", date_format="iso",
                                            lines=True).splitlines()):
            store.con.execute("INSERT INTO slot_rows VALUES (?, ?, ?)", [rid, i, rec])
        store.con.execute("DELETE FROM run_metrics WHERE run_id = ? AND (metric LIKE "
                          "'bill_%' OR metric LIKE '%no_jobs%')", [rid])
    with Store(db, read_only=True) as store:
        sc = runs_mod.run_scenario_of(store, rid)
        m = runs_mod.stored_metrics(store, rid, sc)
    assert m["meter_note"] == runs_mod.METER_REPLAYED
    assert m["bill_total"] == pytest.approx(now["bill"]["total"])
    assert m["bill_no_jobs_total"] == pytest.approx(now["bill"]["no_jobs_total"])
    assert main(["--db", str(db), "runs", "show", rid]) == 0
    assert "recomputed from its stored slot records" in capsys.readouterr().out


def test_a_comparison_is_one_under_the_same_power_caps() -> None:
    """A stored comparison run counts as a run's comparison only when it was metered against
    the same power caps (and the app keys its shared comparisons by them too)."""
    from workbench.app.shared import ComparisonKey
    from workbench.runs import same_settings

    settings_ = json.dumps({"slot_s": 900, "n_slots": 8, "forecast_mode": "tariff",
                            "forecast_error": 0.0})
    capped = {"settings": settings_, "knobs": json.dumps({"power_cap_kw": 75.0})}
    other = {"settings": settings_, "knobs": json.dumps({"power_cap_kw": 60.0})}
    free = {"settings": settings_, "knobs": json.dumps({"V": 1.0})}
    assert same_settings(capped, dict(capped)) and same_settings(free, {**free, "knobs": "{}"})
    assert not same_settings(capped, other) and not same_settings(capped, free)
    spec = RunSpec("s", "lookahead", caps=Caps(power_kw=75.0, carbon_kg=10.0))
    assert spec.comparison("asap-home").metered == Caps(power_kw=75.0)
    keys = {ComparisonKey("db", "s", "f", 900, 8, None, 0.0, metered=m)
            for m in (Caps(), Caps(power_kw=75.0), Caps(power_kw=75.0))}
    assert len(keys) == 2


def test_the_attribution_adds_up_to_the_bills_saving() -> None:
    jobs = tuple(training(f"j{i}", home="a", arrival_slot=i, slots_of_work=2.0,
                          deadline_slot=12) for i in range(3)) + (
        inference("svc", home="b", last=12),)
    sc = _sited(export=0.02, jobs=jobs)
    out = run_spec(RunSpec(sc.name, "lookahead", power_limits=(1.0, 0.7)), sc)
    assert out.attribution is not None and out.baseline is not None
    m, b = out.result.metrics, out.baseline.metrics
    parts = out.attribution["cost"]
    assert set(parts) >= {"efficiency", "temporal", "spatial", "movement", "power_limits",
                          "supply", "demand"}
    assert sum(parts.values()) == pytest.approx(b["cost"] - m["cost"], abs=1e-9)
    assert b["cost"] - m["cost"] == pytest.approx(b["bill_total"] - m["bill_total"], abs=1e-9)
    kg = out.attribution["carbon_kg"]
    assert sum(kg.values()) == pytest.approx(b["carbon_kg"] - m["carbon_kg"], abs=1e-9)
