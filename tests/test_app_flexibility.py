"""The app's Flexibility tab and the grid events on the Supply chart: the offers are the
CLI's (``workbench flexibility``), an offer planned from the tab is the ``plan --grid-event``
run and its report, and the Supply chart marks the events a run held, live and stored."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import holoviews as hv
import pandas as pd
import panel as pn
import pytest

from workbench import Store
from workbench.app import WorkbenchState, create_app, derive, plots
from workbench.app.shared import SharedCache
from workbench.app.views.flexibility import FlexibilityView
from workbench.cli import main
from workbench.flexibility import OFFER_COLUMNS
from workbench.model import Scenario
from workbench.policies import DEFAULT_POLICY
from workbench.scenarios import first_hours


def _mini(seed3: Scenario) -> Scenario:
    """seed3 cut to one day and the jobs arriving in its first six hours."""
    return first_hours(seed3, 24, arrivals_h=6, name="mini")


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory, seed3: Scenario
            ) -> tuple[Path, WorkbenchState]:
    """A store with ``mini`` and the default policy's run of it made by the app (stored),
    the session showing it."""
    db = tmp_path_factory.mktemp("flex") / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_mini(seed3))
    s = WorkbenchState(db_path=str(db), scenario_name="mini", baseline_policies=[],
                       shared=SharedCache())
    assert s.policy == DEFAULT_POLICY
    assert s.run() is not None, s.message
    return db, s


def _cli_offers(db: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> pd.DataFrame:
    assert main(["--db", str(db), "flexibility", "--scenario", "mini", "--json",
                 "--no-progress", *extra]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return pd.DataFrame(out["offers"], columns=list(OFFER_COLUMNS))


def test_the_offers_are_the_clis_for_the_shown_run_live_and_stored(
        planned: tuple[Path, WorkbenchState], capsys: pytest.CaptureFixture[str]) -> None:
    db, s = planned
    s.param.update(flex_hours=3.0, flex_notice_h=2.0, flex_site="")
    live = s.compute_offers()
    assert live is not None, s.message
    cli = _cli_offers(db, capsys, "--hours", "3", "--notice-h", "2")
    assert list(live.columns) == list(OFFER_COLUMNS)
    pd.testing.assert_frame_equal(live.reset_index(drop=True), cli, check_dtype=False)
    assert (live["sheddable_kw"] > 0).any()
    # The same run reopened from the store (no job outcomes, no slot numbers): same offers.
    fresh = WorkbenchState(db_path=str(db), scenario_name="mini", baseline_policies=[],
                           shared=SharedCache())
    assert fresh.run_info.get("run_id") == s.run_info.get("run_id")
    assert fresh.result is not None and fresh.result.jobs.empty
    stored = fresh.compute_offers()
    assert stored is not None, fresh.message
    pd.testing.assert_frame_equal(stored, live)
    # One site, other hours: the CLI's --datacenter, --hours and --notice-h.
    s.param.update(flex_hours=2.0, flex_notice_h=1.0, flex_site="guangzhou")
    one = s.compute_offers()
    assert one is not None and set(one["datacenter"]) == {"guangzhou"}
    cli = _cli_offers(db, capsys, "--hours", "2", "--notice-h", "1", "--datacenter",
                      "guangzhou")
    pd.testing.assert_frame_equal(one.reset_index(drop=True), cli, check_dtype=False)
    s.flex_site = ""


def test_the_offers_read_in_a_worker_thread_are_the_same(
        planned: tuple[Path, WorkbenchState]) -> None:
    _, s = planned
    s.param.update(flex_hours=3.0, flex_notice_h=2.0, flex_site="")
    here = s.compute_offers()
    there = asyncio.run(s.compute_offers_async())
    assert here is not None and there is not None
    pd.testing.assert_frame_equal(here, there)
    assert s.stage == ""


@pytest.mark.parametrize(("field", "value", "says"), [
    ("flex_hours", 0.0, "event hours must be in (0, 168]"),
    ("flex_hours", 30.0, "do not fit the horizon"),
    ("flex_notice_h", -1.0, "notice hours must be in [0, 168]"),
    ("flex_site", "mars", "site 'mars' is not in mini"),
])
def test_bad_flexibility_input_is_refused_in_one_line(
        planned: tuple[Path, WorkbenchState], field: str, value: object, says: str) -> None:
    _, s = planned
    before = s.offers
    try:
        s.param.update(**{field: value})
        assert s.compute_offers() is None
        assert says in s.message and "\n" not in s.message
        assert s.message_kind == "danger"
        assert s.offers is before  # the offers shown stay
    finally:
        s.param.update(flex_hours=3.0, flex_notice_h=2.0, flex_site="")


def test_the_best_offer_is_picked_with_its_cost_curve_and_cells_pick_others(
        planned: tuple[Path, WorkbenchState]) -> None:
    _, s = planned
    table = s.compute_offers()
    assert table is not None
    offer = s.picked_offer()
    assert offer is not None
    assert offer["sheddable_kw"] == pytest.approx(table["sheddable_kw"].max())
    curve = derive.cost_curve_frame(s.picked_curve())
    assert tuple(curve.iloc[0]) == (0.0, 0.0)
    assert curve["kw_shed"].iloc[-1] == pytest.approx(offer["sheddable_kw"])
    assert curve["kw_shed"].is_monotonic_increasing
    # A cell (a site and a time inside the horizon) picks the nearest start of that site.
    other = table[table["datacenter"] != offer["datacenter"]].iloc[5]
    s.pick_offer(str(other["datacenter"]),
                 pd.Timestamp(other["start"]) + pd.Timedelta(minutes=10))
    assert s.flex_pick == {"datacenter": other["datacenter"], "start": other["start"]}
    # The heatmap and the curve are figures of the tables.
    frame = derive.offers_frame(table, "Asia/Shanghai")
    assert frame["start_local"].iloc[0] == pd.Timestamp(table["start"].iloc[0]).tz_convert(
        "Asia/Shanghai").tz_localize(None)
    assert isinstance(plots.offers_heatmap(frame, "Asia/Shanghai", "CNY"), hv.HeatMap)
    assert isinstance(plots.cost_curve(curve, "t", "CNY"), hv.Overlay)
    assert isinstance(plots.cost_curve(curve.iloc[:1], "t", "CNY"), hv.Text)


def test_an_offer_with_nothing_to_shed_is_not_planned(
        planned: tuple[Path, WorkbenchState]) -> None:
    _, s = planned
    table = s.compute_offers()
    assert table is not None
    none = table[table["sheddable_kw"] <= 0].iloc[0]
    s.pick_offer(str(none["datacenter"]), none["start"])
    outcome = s.compute_event()
    assert outcome.result is None and "no kW to shed" in outcome.error


@pytest.mark.slow
def test_planning_the_best_offer_keeps_it_and_the_supply_chart_marks_it(
        planned: tuple[Path, WorkbenchState], capsys: pytest.CaptureFixture[str]) -> None:
    db, s = planned
    s.param.update(flex_hours=3.0, flex_notice_h=2.0, flex_site="")
    table = s.compute_offers()
    assert table is not None
    offer = s.picked_offer()
    assert offer is not None and offer["sheddable_kw"] > 0
    base_id = s.run_info["run_id"]
    res = s.run(s.compute_event)
    assert res is not None, s.message
    # The plan --grid-event report: the event kept, with no new deadline miss.
    row, = res.meta["grid_events"]
    assert (row["datacenter"], row["limit_kw"]) == (offer["datacenter"], offer["limit_kw"])
    assert pd.Timestamp(row["start"]) == pd.Timestamp(offer["start"])
    assert row["new_misses"] == []
    assert row["met"] and row["max_import_kw"] <= row["limit_kw"] * (1 + 1e-6) + 1e-9, row
    assert row["shed_kwh"] > 0
    assert s.run_info["run_id"] != base_id  # stored as a run of its own
    from workbench.runs import knobs_text

    assert "1 grid event" in knobs_text(s.run_info)  # the banner and `runs show` say so
    # The same as the CLI's plan --grid-event with the offer's numbers.
    assert main(["--db", str(db), "plan", "--scenario", "mini", "--no-baseline",
                 "--no-strongest", "--json", "--grid-event",
                 f"{offer['datacenter']},{offer['start']},{offer['hours']:g},"
                 f"{offer['limit_kw']!r},{offer['notice_hours']:g}"]) == 0
    cli, = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["grid_events"]
    for key in ("met", "limit_kw", "max_import_kw", "shed_kwh", "extra_cost", "payment",
                "new_misses"):
        assert cli[key] == pytest.approx(row[key]), key
    # The tab's report and table say kept; the shown run's envelope is refused (it holds
    # an event), the offers shown stay.
    rows = derive.event_rows(res, s.scenario)
    table_shown = derive.event_table(rows, "CNY", "UTC")
    assert list(table_shown["kept"]) == ["kept" if row["met"] else "MISSED"]
    assert table_shown["shed (kWh)"].iloc[0] == pytest.approx(row["shed_kwh"])
    assert s.compute_offers() is None and "holds 1 grid event" in s.message
    assert s.offers is table
    # The Supply chart of the event's site: its window shaded, its limit drawn.
    windows = derive.event_windows(derive.run_events(res.meta), s.scenario,
                                   offer["datacenter"])
    assert list(windows["limit_kw"]) == [offer["limit_kw"]]
    assert windows["end"].iloc[0] - windows["start"].iloc[0] == pd.Timedelta(hours=3)
    frame = derive.supply_frame(res.slots, offer["datacenter"], s.scenario.slot_s)
    chart = plots.supply_stack(frame, offer["datacenter"], "UTC", windows)
    kinds = {type(e).__name__ for e in chart}
    assert {"VSpan", "Segments", "Area", "Curve"} <= kinds
    assert not derive.event_windows(derive.run_events(res.meta), s.scenario,
                                    "nowhere").size
    # Reopened from the store: the events from its stored caps, the report stored with it.
    fresh = WorkbenchState(db_path=str(db), scenario_name="mini", baseline_policies=[],
                           shared=SharedCache())
    fresh.load_run(s.run_info["run_id"])
    assert fresh.result is not None
    again, = derive.event_rows(fresh.result, fresh.scenario)
    assert again["met"] == row["met"]
    assert again["limit_kw"] == pytest.approx(offer["limit_kw"])
    assert again["max_import_kw"] == pytest.approx(row["max_import_kw"])
    assert again == row
    assert len(derive.event_windows(derive.run_events(fresh.result.meta), fresh.scenario,
                                    offer["datacenter"])) == 1


@pytest.mark.slow
def test_the_tab_renders_and_its_csv_is_the_offers(planned: tuple[Path, WorkbenchState]
                                                   ) -> None:
    db, s = planned
    app = create_app(str(db), shared=SharedCache(), baseline_policies=[])
    base = s.offers_from.get("run_id") or s.run_info["run_id"]
    app.s.load_run(str(base))  # a run without events (a later test may have stored one)
    app.open_tab("Flexibility")
    view = app.views["Flexibility"]
    assert isinstance(view, FlexibilityView)
    pn.panel(view).get_root()
    assert view.download.disabled and view.plan_button.disabled
    view.compute_button.clicks += 1
    view.compute_button.param.trigger("clicks")
    table = app.s.offers
    assert table is not None, app.s.message
    assert not view.download.disabled
    assert view.plan_button.disabled == (float(app.s.picked_offer()["sheddable_kw"]) <= 0)
    csv = pd.read_csv(io.StringIO(view._offers_csv().getvalue()))
    assert list(csv.columns) == list(OFFER_COLUMNS) and len(csv) == len(table)
    # The selectors show the chosen offer; choosing another site picks its offer.
    pick = app.s.flex_pick
    assert view.pick_site.value == pick["datacenter"]
    assert view.pick_start.value == pick["start"]
    other = next(d for d in view.pick_site.options if d != pick["datacenter"])
    view.pick_site.value = other
    assert app.s.flex_pick["datacenter"] == other
    # A click on the heatmap (wall-clock time in the zone shown, a site) picks its cell.
    row = table[table["datacenter"] == pick["datacenter"]].iloc[3]
    local = pd.Timestamp(row["start"]).tz_convert(app.s.tz).tz_localize(None)
    view._tapped(x=local.to_datetime64(), y=pick["datacenter"])
    assert app.s.flex_pick == {"datacenter": pick["datacenter"], "start": row["start"]}
    for pane in (view._heatmap(), view._offer(), view._report()):
        pn.panel(pane).get_root()


@pytest.mark.slow
def test_a_scenarios_own_events_are_held_reported_and_marked_by_an_app_run(
        tmp_path: Path, seed3: Scenario) -> None:
    """A scenario with ``[[grid_events]]``: the app's run holds them, reports them against
    the same run without them (its own progress row), and the Supply chart marks them; its
    offers are still read (the events are the scenario's, not added to the run)."""
    import dataclasses

    from workbench.events import GridEvent

    sc = _mini(seed3)
    event = GridEvent("guangzhou", 4.0, 3.0, cut_pct=2.0, notice_hours=2.0)
    sc = dataclasses.replace(sc, name="mini-ev", supply=dataclasses.replace(
        sc.supply, grid_events=(event,)))
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(sc)
    s = WorkbenchState(db_path=str(db), scenario_name="mini-ev", baseline_policies=[],
                       shared=SharedCache())
    res = s.run()
    assert res is not None, s.message
    row, = res.meta["grid_events"]
    assert row["datacenter"] == "guangzhou" and row["shed_kwh"] is not None
    assert row["limit_kw"] == pytest.approx(row["planned_import_kw"] * 0.98)
    assert [r["policy"] for r in s.progress_rows] == [f"{s.policy} without the events",
                                                      s.policy]
    windows = derive.event_windows(derive.run_events(res.meta), s.scenario, "guangzhou")
    assert len(windows) == 1 and windows["start"].iloc[0] == pd.Timestamp(
        s.scenario.start) + pd.Timedelta(hours=4)
    assert s.compute_offers() is not None, s.message
