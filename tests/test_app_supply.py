"""The app's Supply tab: a datacenter's supply against its load and the bill's breakdown,
from a real run of a tiny scenario with solar, a battery and a demand charge."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import pytest
from helpers_sim import SLOT_S, inference, tiny_scenario, training

from workbench import Store
from workbench.app import create_app, derive, plots
from workbench.meter import idle_kw
from workbench.runner import RunSpec, simulate_spec
from workbench.schema import site_key
from workbench.supply import Battery, DemandCharge, DemandStructure, Source, Supply

SUN = np.array([0, 0, 1, 3, 4, 3, 1, 0, 0, 0, 0, 0], dtype=float)


def _scenario():  # noqa: ANN202 - a Scenario
    jobs = [training(f"j{i}", home="a", arrival_slot=i, slots_of_work=2.0, deadline_slot=12)
            for i in range(3)] + [inference("svc", home="b", last=12)]
    sc = tiny_scenario(jobs, n_slots=12)
    return dataclasses.replace(sc, name="sunny", supply=Supply(
        sources=(Source("pv", "a", "solar", 4.0, SUN),),
        batteries=(Battery("bat", "a", 1.0, 1.0),),
        demand_charges=(DemandCharge("d", "b", (DemandStructure.flat(10.0),)),)))


def test_supply_frame_adds_up_to_the_load_and_charging_in_kw() -> None:
    sc = _scenario()
    res, _ = simulate_spec(RunSpec("sunny", "asap-home", baseline=False), sc)
    frame = derive.supply_frame(res.slots, "a", SLOT_S)
    assert len(frame) == sc.n_slots
    np.testing.assert_allclose(frame["renewables"] + frame["battery"] + frame["grid"],
                               frame["load"] + frame["charging"], atol=1e-9)
    # kW: the slot's kWh over its hours; the renewables used and curtailed are the sun.
    np.testing.assert_allclose(frame["renewables"] + frame["curtailed"], SUN, atol=1e-9)
    # The meter's load: the jobs and the site's idle load, kW.
    np.testing.assert_allclose(frame["load"], res.slots[site_key("load_kw", "a")])
    np.testing.assert_allclose(frame["load"], res.slots["energy_kwh:a"] / (SLOT_S / 3600.0)
                               + idle_kw(sc)[0], atol=1e-9)
    assert derive.supply_frame(res.slots.drop(columns=[site_key("grid_kwh", "a")]), "a",
                               SLOT_S).empty
    chart = plots.supply_stack(frame, "a")
    assert isinstance(chart, hv.Overlay) and not isinstance(chart, hv.Layout)
    assert "kW" in chart.opts.get().kwargs["title"]


def test_bill_table_is_the_metrics_per_datacenter_and_their_sum() -> None:
    sc = _scenario()
    res, _ = simulate_spec(RunSpec("sunny", "asap-home", baseline=False), sc)
    m = res.metrics
    table = derive.bill_table(m, ["a", "b"], "USD")
    assert list(table.columns) == [c.format(c="USD", tz="UTC") for c in derive.BILL_COLUMNS]
    assert list(table["datacenter"]) == ["a", "b", "all"]
    b = table.set_index("datacenter")
    assert b.loc["b", "demand (USD)"] == pytest.approx(m["bill_demand:b"])
    assert b.loc["b", "demand (USD)"] > 0 and b.loc["a", "demand (USD)"] == 0
    assert b.loc["b", "peak grid kW"] == pytest.approx(m["peak_kw:b"])
    assert b.loc["all", "total (USD)"] == pytest.approx(m["bill_total"])
    assert b["total (USD)"].iloc[:2].sum() == pytest.approx(m["bill_total"])
    assert derive.bill_table({}, ["a"], "USD").empty
    # The peak's time in the sidebar's zone.
    when = pd.Timestamp(m["peak_time:b"]).tz_convert("Asia/Shanghai")
    local = derive.bill_table(m, ["a", "b"], "USD", "Asia/Shanghai").set_index("datacenter")
    assert local.loc["b", "peak at (Asia/Shanghai)"] == f"{when:%Y-%m-%d %H:%M}"


@pytest.mark.slow
def test_the_supply_tab_renders_the_chart_and_the_bill(tmp_path: Path) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_scenario())
    app = create_app(str(db), scenario_name="sunny", policy="asap-home",
                     baseline_policies=[], save_runs=False)
    view = app.views["Supply"]
    pn.panel(view).get_root()  # before any run
    assert app.state.run() is not None
    root = pn.panel(view)
    root.get_root()
    assert view.site.options[0] == "a"  # sites with supply first
    bill = view._bill()
    text = " ".join(str(p.object) for p in bill.select(pn.pane.Markdown))
    assert "Green share" in text and "kWh of renewables curtailed" in text
    tables = bill.select(pn.widgets.Tabulator)
    assert tables and list(tables[0].value["datacenter"]) == ["a", "b", "all"]
    chart = view._site_chart("a")
    assert isinstance(chart, pn.pane.HoloViews)
    assert "a: supply (kW)" in chart.object.opts.get().kwargs["title"]


def test_the_quote_tab_offers_the_power_limit_trade_off(tmp_path: Path) -> None:
    from workbench.app.views.quote import quote_table
    from workbench.power_limits import DEFAULT_MENU

    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_scenario())
    app = create_app(str(db), scenario_name="sunny", policy="asap-home", save_runs=False)
    view = app.views["Quote"]
    view._on_quote(None)
    plain = app.state.last_quote
    assert plain is not None and plain.options["power_limit_w"].nunique() == 1
    view.limits.value = True
    view._on_quote(None)
    q = app.state.last_quote
    assert q is not None and len(q.options) == len(DEFAULT_MENU) * len(plain.options)
    table = quote_table(q.options, q.currency)
    assert "power limit (W/GPU)" in table.columns
    assert table["power limit (W/GPU)"].nunique() == len(DEFAULT_MENU)
    pn.panel(view).get_root()


def test_the_waterfall_shows_the_green_levers_parts_only_when_a_run_has_them() -> None:
    import re

    from workbench.app import markup

    plain = {"efficiency": 1.0, "temporal": 2.0, "spatial": 0.0, "movement": -0.5,
             "power_limits": 0.0, "supply": 0.0, "demand": 0.0}
    html = markup.attribution_waterfall(plain, "saved (USD)", "t")
    assert "demand charges" not in html and "GPU power limits" not in html
    green = {**plain, "power_limits": 0.8, "supply": 25.0, "demand": 140.0}
    html = markup.attribution_waterfall(green, "saved (USD)", "t")
    assert "GPU power limits" in html and "supply (renewables, battery)" in html
    assert "demand charges (lower peaks)" in html and "+140.00" in html
    # The total is the sum of every part drawn.
    assert f"{sum(green.values()):+,.2f}" in html
    assert len(re.findall(r"background:#2ca02c", html)) >= 5
