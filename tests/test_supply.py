"""On-site supply: the datacenter-slot energy balance (property tests), the greedy and the
planned battery, demand charges computed by hand, and supply in simulated runs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from helpers_sim import SLOT_S, inference, tiny_scenario, training
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.bill import buckets, compute_bill, month_share
from workbench.meter import idle_kw
from workbench.model import ScenarioError
from workbench.outcome import site_balance
from workbench.outcome.supply import TOLERANCE
from workbench.runner import RunSpec, SpecError, simulate_spec
from workbench.schema import site_key
from workbench.supply import (
    Battery,
    DemandCharge,
    DemandStructure,
    Source,
    Supply,
    entry_from_dict,
    entry_to_dict,
    forecast_output,
    ignore_set,
)

H = SLOT_S / 3600.0


def _sources(n: int, prices: list[float], take: list[bool]) -> list[Source]:
    return [Source(f"s{i}", "a", "ppa" if take[i] else "solar", 10.0, np.zeros(1),
                   price_per_kwh=prices[i], take_or_pay=take[i]) for i in range(n)]


kwh = st.floats(0.0, 50.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(load=kwh, avail=st.lists(kwh, min_size=0, max_size=3),
       prices=st.lists(st.floats(-0.5, 2.0), min_size=3, max_size=3),
       take=st.lists(st.booleans(), min_size=3, max_size=3),
       energy=st.floats(1.0, 100.0), power=st.floats(0.5, 80.0),
       rte=st.floats(0.5, 1.0), lo=st.floats(0.0, 0.5), span=st.floats(0.05, 0.5),
       soc_frac=st.floats(0.0, 1.0),
       decision=st.one_of(st.none(), st.floats(-100.0, 100.0)),
       export=st.one_of(st.none(), st.floats(0.0, 1.0)), with_battery=st.booleans())
@pytest.mark.slow
def test_every_datacenter_slot_supplies_its_load_and_keeps_its_battery_in_bounds(
        load: float, avail: list[float], prices: list[float], take: list[bool], energy: float,
        power: float, rte: float, lo: float, span: float, soc_frac: float,
        decision: float | None, export: float | None, with_battery: bool) -> None:
    sources = _sources(len(avail), prices, take)
    bat = (Battery("b", "a", energy, power, rte, soc_initial=lo, soc_min=lo,
                   soc_max=min(lo + span, 1.0)) if with_battery else None)
    soc = (bat.soc_min_kwh + soc_frac * bat.usable_kwh) if bat is not None else 0.0
    s = site_balance(load, avail, sources, grid_price_per_kwh=0.3, grid_carbon_g_per_kwh=400,
                     slot_h=H, battery=bat, soc_kwh=soc, battery_kw=decision,
                     export_price_per_kwh=export)
    # The load is served: renewables + battery + grid, to 1e-9.
    assert math.isclose(s.renewable_to_load_kwh + s.discharge_kwh + s.grid_to_load_kwh,
                        s.load_kwh, abs_tol=1e-9)
    # What came in is what went out (the battery's charge included).
    assert math.isclose(s.renewable_kwh + s.grid_kwh + s.discharge_kwh,
                        s.load_kwh + s.charge_kwh, abs_tol=1e-9)
    # Every renewable kWh was used, curtailed or exported.
    assert math.isclose(sum(avail), s.renewable_kwh + s.curtailed_kwh + s.exported_kwh,
                        abs_tol=1e-9)
    assert min(s.grid_kwh, s.grid_to_load_kwh, s.curtailed_kwh, s.exported_kwh,
               s.charge_kwh, s.discharge_kwh) >= -1e-12
    assert all(0 <= u <= a + 1e-12 for u, a in zip(s.used_kwh, avail, strict=True))
    if export is None:
        assert s.exported_kwh == 0.0
    if bat is not None:
        assert bat.soc_min_kwh - TOLERANCE <= s.soc_kwh <= bat.soc_max_kwh + TOLERANCE
        assert s.charge_kwh <= bat.power_kw * H + 1e-12
        assert s.discharge_kwh <= bat.power_kw * H + 1e-12
        assert math.isclose(s.soc_kwh, soc + bat.eta * s.charge_kwh - s.discharge_kwh / bat.eta,
                            abs_tol=1e-9)
    else:
        assert s.charge_kwh == s.discharge_kwh == 0.0


@settings(max_examples=60, deadline=None)
@given(loads=st.lists(kwh, min_size=1, max_size=40),
       suns=st.lists(kwh, min_size=40, max_size=40),
       decisions=st.lists(st.one_of(st.none(), st.floats(-50.0, 50.0)), min_size=40,
                          max_size=40))
def test_a_battery_never_leaves_its_bounds_over_many_slots(
        loads: list[float], suns: list[float], decisions: list[float | None]) -> None:
    bat = Battery("b", "a", 20.0, 8.0, 0.85, soc_initial=0.5, soc_min=0.2, soc_max=0.9)
    src = _sources(1, [0.0], [False])
    soc = bat.soc_initial_kwh
    for load, sun, dec in zip(loads, suns, decisions, strict=False):
        s = site_balance(load, [sun], src, grid_price_per_kwh=1.0, grid_carbon_g_per_kwh=0.0,
                         slot_h=H, battery=bat, soc_kwh=soc, battery_kw=dec)
        soc = s.soc_kwh
        assert bat.soc_min_kwh - TOLERANCE <= soc <= bat.soc_max_kwh + TOLERANCE


def test_greedy_dispatch_charges_from_surplus_and_discharges_into_a_deficit() -> None:
    bat = Battery("b", "a", 10.0, 40.0, 1.0, soc_initial=0.5, soc_min=0.0)
    src = _sources(1, [0.0], [False])
    sunny = site_balance(2.0, [5.0], src, grid_price_per_kwh=1.0, grid_carbon_g_per_kwh=500,
                         slot_h=H, battery=bat, soc_kwh=5.0)
    assert sunny.charge_kwh == pytest.approx(3.0) and sunny.grid_kwh == 0.0
    assert sunny.curtailed_kwh == pytest.approx(0.0) and sunny.soc_kwh == pytest.approx(8.0)
    full = site_balance(2.0, [5.0], src, grid_price_per_kwh=1.0, grid_carbon_g_per_kwh=500,
                        slot_h=H, battery=bat, soc_kwh=10.0)
    assert full.charge_kwh == 0.0 and full.curtailed_kwh == pytest.approx(3.0)
    sold = site_balance(2.0, [5.0], src, grid_price_per_kwh=1.0, grid_carbon_g_per_kwh=500,
                        slot_h=H, battery=bat, soc_kwh=10.0, export_price_per_kwh=0.1)
    assert sold.exported_kwh == pytest.approx(3.0) and sold.energy_charge == pytest.approx(-0.3)
    night = site_balance(4.0, [0.0], src, grid_price_per_kwh=1.0, grid_carbon_g_per_kwh=500,
                         slot_h=H, battery=bat, soc_kwh=3.0)
    assert night.discharge_kwh == pytest.approx(3.0) and night.grid_kwh == pytest.approx(1.0)
    assert night.energy_charge == pytest.approx(1.0) and night.carbon_kg == pytest.approx(0.5)


def test_under_an_import_cap_the_battery_discharges_what_keeps_it_whatever_the_decision(
) -> None:
    bat = Battery("b", "a", 10.0, 40.0, 1.0, soc_initial=0.5, soc_min=0.0)
    src = _sources(1, [0.0], [False])
    kw = dict(grid_price_per_kwh=1.0, grid_carbon_g_per_kwh=500, slot_h=H, battery=bat)
    # 8 kWh of load, 1 from the sun, a 4 kWh cap: 3 must come from the battery, even when
    # the planner asked for 1 kWh or to charge (the greedy dispatch gives all it has).
    greedy = site_balance(8.0, [1.0], src, soc_kwh=5.0, import_cap_kwh=4.0, **kw)
    assert greedy.discharge_kwh == pytest.approx(5.0) and greedy.grid_kwh == pytest.approx(2.0)
    for decision in (1.0 / H, -2.0 / H):
        got = site_balance(8.0, [1.0], src, soc_kwh=5.0, import_cap_kwh=4.0, battery_kw=decision,
                           **kw)
        assert got.grid_kwh == pytest.approx(4.0) and got.charge_kwh == 0.0
        assert got.discharge_kwh == pytest.approx(3.0)
    # A battery that cannot cover it gives what it has; the grid takes the rest.
    low = site_balance(8.0, [1.0], src, soc_kwh=1.0, import_cap_kwh=4.0, battery_kw=0.0, **kw)
    assert low.discharge_kwh == pytest.approx(1.0) and low.grid_kwh == pytest.approx(6.0)
    # Within the cap the decision stands.
    free = site_balance(3.0, [1.0], src, soc_kwh=5.0, import_cap_kwh=4.0, battery_kw=0.0, **kw)
    assert free.discharge_kwh == 0.0 and free.grid_kwh == pytest.approx(2.0)


def test_merit_order_take_or_pay_first_and_what_it_costs() -> None:
    solar = Source("pv", "a", "solar", 10.0, np.zeros(1), price_per_kwh=0.05)
    ppa = Source("ppa", "a", "ppa", 10.0, np.zeros(1), price_per_kwh=0.2, take_or_pay=True,
                 carbon_g_per_kwh=20.0)
    s = site_balance(3.0, [2.0, 2.0], [solar, ppa], grid_price_per_kwh=1.0,
                     grid_carbon_g_per_kwh=500, slot_h=H)
    # The PPA is paid for in full (take or pay), so it serves first; the solar tops up.
    assert s.used_kwh == pytest.approx((1.0, 2.0))
    assert s.energy_charge == pytest.approx(1.0 * 0.05 + 2.0 * 0.2)
    assert s.carbon_kg == pytest.approx(2.0 * 20 / 1000)
    assert s.curtailed_kwh == pytest.approx(1.0) and s.grid_kwh == 0.0


def test_demand_charge_computed_by_hand_on_a_tiny_scenario() -> None:
    jobs = [training("j", home="b", slots_of_work=2.0, deadline_slot=8, gpus=2)]
    sc = tiny_scenario(jobs, n_slots=8)
    a, b = sc.datacenters
    # b idles at 2 kW (2.4 kW with its PUE of 1.2): metered with its jobs, in its peak.
    sc = dataclasses.replace(sc, datacenters=(a, dataclasses.replace(b, idle_power_kw=2.0)),
                             supply=Supply(demand_charges=(
                                 DemandCharge("dem", "b", (DemandStructure.flat(20.0),)),)))
    res, _ = simulate_spec(RunSpec("tiny", "asap-home", baseline=False), sc)
    m = res.metrics
    plan = res.plan
    at_b = plan[plan["region"] == "b"].groupby("slot")["energy_kwh"].sum()
    peak_kw = float(at_b.max()) / H + 2.4
    # Eight 15-minute slots of July 2025 (31 days): 2 of 744 hours.
    share = 2.0 / (31 * 24)
    assert month_share(sc, "UTC", 2025 * 12 + 6) == pytest.approx(share)
    assert m["peak_kw:b"] == pytest.approx(peak_kw)
    assert m["bill_demand"] == pytest.approx(20.0 * peak_kw * share)
    assert m["bill_demand:a"] == 0.0
    # No job runs at a; b's idle load is metered with its jobs: the plan's part is the
    # bill less the no-jobs bill, whose demand charge is on the idle load alone.
    idle_b = sc.datacenters[1].idle_power_kw * sc.datacenters[1].pue
    assert m["bill_no_jobs_demand"] == pytest.approx(20.0 * idle_b * share)
    assert m["cost"] == pytest.approx(m["bill_total"] - m["bill_no_jobs_total"])
    assert m["bill_total"] == pytest.approx(m["bill_energy"] + m["bill_demand"])
    assert m["demand_proration"] == pytest.approx(share)
    assert "2025-07: 0.1 of 31 days" in m["bill_note"]


def test_tiered_and_time_of_use_demand_charges() -> None:
    urdb_like = DemandStructure(tiers=(((math.inf, 0.0),),
                                       ((100.0, 24.368), (math.inf, 17.031))),
                                weekday=tuple(tuple(1 if 8 <= h < 20 else 0 for h in range(24))
                                              for _ in range(12)),
                                weekend=tuple(tuple(0 for _ in range(24)) for _ in range(12)))
    assert urdb_like.charge(1, 150.0) == pytest.approx(100 * 24.368 + 50 * 17.031)
    assert urdb_like.charge(1, 40.0) == pytest.approx(40 * 24.368)
    assert urdb_like.charge(0, 500.0) == 0.0
    assert urdb_like.marginal_price(1, 120.0) == 17.031
    sc = tiny_scenario(n_slots=96 * 2)  # two days from Tuesday 2025-07-01 00:00 UTC
    sc = dataclasses.replace(sc, supply=Supply(demand_charges=(
        DemandCharge("dem", "a", (urdb_like,), capacity_kva=500.0, price_per_kva_month=3.0),)))
    lines = buckets(sc)
    assert sorted((b.period, b.slots.size) for b in lines) == [(0, 96), (1, 96)]
    grid = np.zeros((sc.n_slots, 2))
    grid[40, 0] = 30.0 * H   # 10:00, a weekday peak hour: 30 kW
    grid[4, 0] = 80.0 * H    # 01:00, off-peak: no charge
    charge = np.zeros_like(grid)
    charge[40, 0] = 1.5
    bill = compute_bill(sc, grid, charge)
    share = 48.0 / (31 * 24)
    site = bill.sites[0]
    assert site.demand == pytest.approx(30 * 24.368 * share)
    assert site.capacity == pytest.approx(500 * 3.0 * share)
    assert site.peak_kw == pytest.approx(80.0)
    assert bill.part("demand") + bill.part("capacity") == pytest.approx(
        site.demand + site.capacity)
    assert bill.part("energy") == pytest.approx(1.5)
    assert bill.total == pytest.approx(sum(bill.as_dict()[p] * (-1 if p == "export_credit"
                                                                else 1)
                                           for p in ("energy", "ppa", "export_credit",
                                                     "demand", "capacity")))


def _arbitrage(policy: str, ignore: frozenset[str] = frozenset()) -> tuple:
    price = [0.2, 0.2, 0.2, 0.2, 2.0, 2.0, 2.0, 2.0]
    jobs = [inference("svc", home="a", last=8, gpus=2, max_latency_ms=1.0)]
    sc = tiny_scenario(jobs, n_slots=8, price_a=price)
    bat = Battery("bat", "a", energy_kwh=2.0, power_kw=4.0, round_trip_efficiency=0.9,
                  soc_initial=0.1, soc_min=0.1)
    sc = dataclasses.replace(sc, supply=Supply(batteries=(bat,)))
    res, bound = simulate_spec(RunSpec("tiny", policy, baseline=False, ignore=ignore,
                                       forecast=_perfect()), sc)
    return res, bound


def _perfect():  # noqa: ANN202 - a RunSpec field
    from workbench.runner import ForecastSettings

    return ForecastSettings(mode="perfect")


@pytest.mark.parametrize("policy", ["lookahead", "offline"])
def test_a_battery_charges_in_a_cheap_slot_and_discharges_in_a_dear_one(policy: str) -> None:
    res, bound = _arbitrage(policy)
    s = res.slots
    assert s[site_key("charge_kwh", "a")].iloc[:4].sum() > 0.5
    assert s[site_key("discharge_kwh", "a")].iloc[4:].sum() > 0.5
    assert s[site_key("discharge_kwh", "a")].iloc[:4].sum() == pytest.approx(0.0, abs=1e-9)
    assert s[site_key("charge_kwh", "a")].iloc[4:].sum() == pytest.approx(0.0, abs=1e-9)
    assert res.metrics["battery_soc_violations"] == 0
    assert res.metrics["battery_cycles"] > 0
    ignored, _ = _arbitrage(policy, frozenset({"supply"}))
    # Planned as if the battery did not exist, the site's greedy dispatch never charges from
    # the grid: the planned battery pays.
    assert ignored.slots[site_key("charge_kwh", "a")].sum() == pytest.approx(0.0, abs=1e-9)
    assert res.metrics["bill_total"] < ignored.metrics["bill_total"] - 0.1
    if policy == "offline":
        assert bound is not None and bound.cost <= res.metrics["cost"] + 1e-9


def test_supply_of_a_run_is_metered_in_every_slot() -> None:
    sun = np.array([0, 0, 1, 3, 4, 3, 1, 0, 0, 0, 0, 0], dtype=float)
    jobs = [training(f"j{i}", home="a", arrival_slot=i, slots_of_work=2.0, deadline_slot=12)
            for i in range(3)] + [inference("svc", home="b", last=12)]
    sc = tiny_scenario(jobs, n_slots=12)
    sc = dataclasses.replace(sc, supply=Supply(
        sources=(Source("pv", "a", "solar", 4.0, sun),),
        batteries=(Battery("bat", "a", 1.0, 1.0),),
        demand_charges=(DemandCharge("d", "b", (DemandStructure.flat(10.0),)),)))
    for policy in ("asap-home", "follow-renewables", "lookahead", "offline"):
        res, _ = simulate_spec(RunSpec("tiny", policy, baseline=False), sc)
        s, m = res.slots, res.metrics
        idle = dict(zip(("a", "b"), idle_kw(sc).tolist(), strict=True))
        for d in ("a", "b"):
            def col(name: str, d: str = d, s: pd.DataFrame = s) -> pd.Series:
                return s[site_key(name, d)]
            supplied = col("renewable_kwh") + col("grid_kwh") + col("discharge_kwh")
            load_kwh = col("load_kw") * H
            np.testing.assert_allclose(supplied, load_kwh + col("charge_kwh"), atol=1e-9)
            # The meter's load: the jobs' energy and the site's idle load.
            np.testing.assert_allclose(load_kwh, s[f"energy_kwh:{d}"] + idle[d] * H,
                                       atol=1e-9)
        assert m["battery_soc_violations"] == 0
        assert 0.0 <= m["green_share"] <= 1.0
        assert m["renewable_kwh"] + m["curtailed_kwh"] == pytest.approx(sun.sum() * H)
        # The plan rows' split adds up to their energy.
        run = res.plan[res.plan["energy_kwh"] > 0]
        np.testing.assert_allclose(run["renewable_kwh"] + run["battery_kwh"] + run["grid_kwh"],
                                   run["energy_kwh"], rtol=1e-9)


def test_forecast_of_an_imported_series_is_seasonal_naive_a_model_its_own() -> None:
    n = 200
    day = 96
    truth = np.arange(n, dtype=float)
    sup = Supply(sources=(Source("pv", "a", "solar", 1e4, truth),
                          Source("wind", "a", "wind", 1e4, truth, modelled=False)))
    fc = forecast_output(sup, 100, 150, "seasonal-naive", SLOT_S)
    assert fc.shape == (50, 2)
    np.testing.assert_array_equal(fc[:, 0], truth[100:150])
    assert fc[0, 1] == 100.0 and fc[1, 1] == truth[101 - day]
    np.testing.assert_array_equal(forecast_output(sup, 100, 150, "perfect", SLOT_S)[:, 1],
                                  truth[100:150])
    early = forecast_output(sup, 10, 20, "seasonal-naive", SLOT_S)
    assert (early[1:, 1] == 10.0).all()  # before a day of history: the latest metered value
    assert sup.static().sources[0].available_kw.size == 0


def test_bad_supply_records_and_levers_say_what_to_fix() -> None:
    with pytest.raises(ScenarioError, match="soc_initial"):
        Battery("b", "a", 10.0, 5.0, soc_initial=0.05, soc_min=0.1)
    with pytest.raises(ScenarioError, match="round_trip_efficiency"):
        Battery("b", "a", 10.0, 5.0, round_trip_efficiency=1.5)
    with pytest.raises(ScenarioError, match=">= 0 kW"):
        Source("pv", "a", "solar", 1.0, np.array([1.0, -1.0]))
    with pytest.raises(ScenarioError, match="more than one battery"):
        Supply(batteries=(Battery("b1", "a", 1.0, 1.0), Battery("b2", "a", 1.0, 1.0)))
    with pytest.raises(ScenarioError, match="which the scenario lacks"):
        dataclasses.replace(tiny_scenario(), supply=Supply(batteries=(Battery("b", "z", 1, 1),)))
    with pytest.raises(ValueError, match="choose from supply, demand-charges, power-limits"):
        ignore_set("supply,sun")
    with pytest.raises(SpecError, match="unknown lever"):
        RunSpec("tiny", ignore=frozenset({"batteries"}))


def test_supply_entries_round_trip_as_json() -> None:
    entries = [Source("pv", "a", "solar", 5.0, np.array([1.0, 2.0]), price_per_kwh=0.01,
                      export_price_per_kwh=0.02, origin="x"),
               Battery("bat", "a", 4.0, 2.0, 0.8, 0.4, 0.2, 0.9),
               DemandCharge("d", "b", (DemandStructure.flat(7.0),), 10.0, 2.0, "here")]
    for e in entries:
        out = [1.0, 2.0] if isinstance(e, Source) else None
        back = entry_from_dict(entry_to_dict(e), out)
        if isinstance(e, Source):
            assert isinstance(back, Source)
            np.testing.assert_array_equal(back.available_kw, e.available_kw)
            assert dataclasses.replace(back, available_kw=np.zeros(0)).__dict__.keys() \
                == e.__dict__.keys()
            assert back.export_price_per_kwh == 0.02
        else:
            assert back == e


def test_the_parts_of_a_saving_add_up_to_the_bills_total_with_the_levers() -> None:
    from workbench.metrics import attribute_savings

    sun = np.array([0, 0, 1, 3, 4, 3, 1, 0, 0, 0, 0, 0], dtype=float)
    jobs = [training(f"j{i}", home="a", arrival_slot=i, slots_of_work=2.0, deadline_slot=12)
            for i in range(3)] + [training("k", home="b", arrival_slot=0, slots_of_work=3.0,
                                           deadline_slot=12)]
    sc = tiny_scenario(jobs, n_slots=12)
    sc = dataclasses.replace(sc, supply=Supply(
        sources=(Source("pv", "a", "solar", 4.0, sun),),
        batteries=(Battery("bat", "a", 1.0, 1.0),),
        demand_charges=(DemandCharge("d", "b", (DemandStructure.flat(10.0),)),)))
    base, _ = simulate_spec(RunSpec("tiny", "asap-home", baseline=False), sc)
    res, _ = simulate_spec(RunSpec("tiny", "lookahead", baseline=False,
                                   power_limits=(1.0, 0.7)), sc)
    att = attribute_savings(res, base, sc)
    assert set(att["cost"]) == {"efficiency", "temporal", "spatial", "movement",
                                "power_limits", "supply", "demand"}
    saving = base.metrics["bill_total"] - res.metrics["bill_total"]
    assert sum(att["cost"].values()) == pytest.approx(saving, abs=1e-9)
    assert att["cost"]["demand"] == pytest.approx(
        base.metrics["bill_demand"] - res.metrics["bill_demand"], abs=1e-12)
    # Without supply, demand charges or limits: the four parts of before, and no others.
    plain = dataclasses.replace(sc, supply=Supply())
    b0, _ = simulate_spec(RunSpec("tiny", "asap-home", baseline=False), plain)
    r0, _ = simulate_spec(RunSpec("tiny", "lookahead", baseline=False, power_limits=()), plain)
    assert set(attribute_savings(r0, b0, plain)["cost"]) == {
        "efficiency", "temporal", "spatial", "movement"}
