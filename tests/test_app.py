"""The app's state object and views without a browser: set parameters, check derived results."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import pandas as pd
import panel as pn
import pytest

from workbench import Store
from workbench.app import WorkbenchState, create_app, derive, markup, plots
from workbench.app.markup import headline_html
from workbench.caps import Caps
from workbench.io.plan_csv import MIGRATION_COLUMNS, PLAN_COLUMNS
from workbench.model import Scenario
from workbench.quote import JobSpec
from workbench.scenarios import first_hours


def _tiny(seed3: Scenario) -> Scenario:
    """seed3 cut to 12 hours and the jobs of its first three hours."""
    return first_hours(seed3, 12, arrivals_h=3, name="tiny")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory, seed3: Scenario) -> Path:
    path = tmp_path_factory.mktemp("app") / "wb.duckdb"
    with Store(path) as store:
        store.save_scenario(_tiny(seed3))
    return path


@pytest.fixture
def state(db: Path) -> WorkbenchState:
    # These tests drive the Lyapunov knobs (V, caps, menus), so they choose that policy.
    return WorkbenchState(db_path=str(db), scenario_name="tiny", policy="lyapunov",
                          baseline_policies=["asap-home"], save_runs=False)


def test_the_app_starts_on_the_products_default_policy(tmp_path: Path,
                                                       seed3: Scenario) -> None:
    from workbench.policies import DEFAULT_POLICY

    with Store(tmp_path / "fresh.duckdb") as store:  # no stored run to open on
        store.save_scenario(_tiny(seed3))
    fresh = WorkbenchState(db_path=str(tmp_path / "fresh.duckdb"), scenario_name="tiny",
                           save_runs=False)
    assert fresh.policy == DEFAULT_POLICY == "lookahead"


def test_scenarios_from_store_and_builtin(state: WorkbenchState) -> None:
    assert {"tiny", "seed3"} <= set(state.param.scenario_name.objects)
    assert state.scenario is not None and state.scenario.name == "tiny"
    assert set(state.carbon_caps_kg) == {d.name for d in state.scenario.datacenters}


def test_knobs_follow_the_sidebar_and_the_policy(state: WorkbenchState) -> None:
    state.param.update(V=5.0, cap_mode="global", carbon_cap_kg=80.0, gpu_counts=[1, 4],
                       migration_threshold=0.3)
    knobs = state.knobs()
    assert knobs == {"V": 5.0, "migration_threshold": 0.3, "gpu_counts": (1, 4)}
    assert state.caps() == Caps(carbon_kg=80.0)
    state.cap_mode = "per datacenter"
    assert state.caps().carbon_kg_by_dc
    # A baseline takes none of the Lyapunov knobs, and no cap.
    assert state.knobs("asap-home") == {} and state.caps("asap-home") == Caps()


@pytest.mark.parametrize(("text", "caps", "error"), [
    ("20%", Caps(carbon_pct_below_baseline=20.0), ""),
    (" 12.5% ", Caps(carbon_pct_below_baseline=12.5), ""),
    ("1,200", Caps(carbon_kg=1200.0), ""),
    ("-5", None, "positive number"),
    ("120%", None, "[0, 100)"),
    ("lots", None, "e.g. 20%"),
    ("", None, "empty"),
])
def test_the_carbon_cap_field_takes_what_the_cli_takes(state: WorkbenchState, text, caps,
                                                       error) -> None:
    """Issue 24 item 5: one parser (Caps.parse_carbon) for the CLI's --carbon-cap and the
    sidebar's global cap: 20% is a percentage below asap-home, not "not a number"."""
    state.cap_mode = "global"
    why = state.enter("carbon_cap_kg", text)
    if caps is None:
        assert error in why and "carbon_cap_kg" in state.blocking_errors()
        return
    assert why == "" and state.caps() == caps
    assert "carbon_cap_kg" not in state.blocking_errors()


def test_slot_length_resamples_the_cube(state: WorkbenchState) -> None:
    state.slot_minutes = 60
    sc = state.planning_scenario()
    assert (sc.slot_s, sc.n_slots) == (3600, 12)
    assert sc.grid.attrs["slot_s"] == 3600


@pytest.mark.slow
def test_run_sets_result_baselines_and_changes_with_v(state: WorkbenchState) -> None:
    res = state.run()
    assert res is not None and state.result is res
    assert state.message_kind in ("success", "warning")
    assert set(state.baselines) == {"asap-home"}
    assert state.progress == state.progress_max
    cost_default = res.metrics["cost"]
    state.V = 10.0 * state.V  # away from the default
    res2 = state.run()
    assert res2 is not None and res2.metrics["cost"] != cost_default
    assert state.runs_done == 2
    table = derive.compare_table(res2.policy, res2.metrics, state.baselines)
    assert list(table["policy"]) == ["lyapunov", "asap-home"]
    assert table.loc[1, "saving_pct"] == pytest.approx(0.0)


def test_error_keeps_previous_result(state: WorkbenchState) -> None:
    res = state.run()
    assert res is not None
    state.policy = "offline"
    state.slot_minutes = 15
    # An impossible slot length for the horizon is a bad input: message, old result kept.
    state.scenario = dataclasses.replace(state.scenario, n_slots=47)
    state.slot_minutes = 30
    assert state.run() is None
    assert state.message_kind == "danger" and "slot" in state.message
    assert state.result is res


def test_run_async_leaves_the_loop_free(state: WorkbenchState) -> None:
    async def main() -> tuple[object, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        res = await state.run_async()
        task.cancel()
        return res, ticks

    res, ticks = asyncio.run(main())
    assert res is not None
    assert ticks > 5  # the event loop kept running while the simulation ran


@pytest.mark.slow
def test_saved_runs_give_a_v_tradeoff(db: Path) -> None:
    state = WorkbenchState(db_path=str(db), scenario_name="tiny", policy="lyapunov",
                           baseline_policies=[])
    for v in (0.1, 20.0):
        state.V = v
        assert state.run() is not None
    assert state.tradeoff is not None
    assert list(state.tradeoff["V"]) == [0.1, 20.0]


def test_derived_tables(state: WorkbenchState) -> None:
    res = state.run()
    assert res is not None
    seg = derive.gantt_segments(res.plan)
    running = res.plan[res.plan["n_gpus"] > 0]
    assert seg["slots"].sum() == len(running)
    assert seg["energy_kwh"].sum() == pytest.approx(running["energy_kwh"].sum())
    occ = derive.occupancy_long(res.slots)
    assert occ["gpus_busy"].sum() == pytest.approx(res.slots["gpus_busy"].sum())
    flows = derive.migration_flows(res.plan, res.migrations)
    assert flows["migrations"].sum() == len(res.migrations)
    if len(res.migrations):
        assert flows["gb"].sum() == pytest.approx(res.migrations["transfer_gb"].sum())
    t0 = res.plan["slot_start"].max() + pd.Timedelta(hours=1)
    assert derive.filter_migrations(res.migrations, start=t0).empty


def test_tradeoff_frame_keeps_latest_per_v() -> None:
    runs = pd.DataFrame({
        "run_id": ["a", "b", "c", "d"],
        "created_utc": pd.to_datetime(["2025-01-01", "2025-01-02", "2025-01-03", "2025-01-04"]),
        "knobs": ['{"V": 1}', '{"V": 10}', '{"V": 1}', "{}"],
    })
    metrics = {k: {"cost": c, "queue_mean:Y": b} for k, c, b in
               (("a", 5.0, 0.1), ("b", 3.0, 0.4), ("c", 4.0, 0.2), ("d", 9.0, 0.0))}
    frame = derive.tradeoff_frame(runs, metrics)
    assert list(frame["V"]) == [1.0, 10.0]
    assert list(frame["cost"]) == [4.0, 3.0]


def test_headline_html_has_metric_ids() -> None:
    html = headline_html({"cost": 12.5, "carbon_kg": 3.0, "energy_kwh": 4.0, "mean_jct_h": 1.0,
                          "deadline_misses": 0, "migrations": 2}, "CNY")
    assert 'id="metric-cost">12.50<' in html and 'id="metric-migrations">2<' in html
    assert "metrics-empty" in headline_html(None)


@pytest.mark.slow
def test_views_render_and_export(db: Path) -> None:
    app = create_app(str(db), scenario_name="tiny", policy="lyapunov",
                     baseline_policies=["asap-home"], save_runs=False)
    assert isinstance(app.__panel__(), pn.viewable.Viewable)
    for view in [app.sidebar, *app.views.values()]:
        pn.panel(view).get_root()  # renders before any run
    assert app.state.run() is not None
    for view in app.views.values():
        pn.panel(view).get_root()  # and after one
    export = app.views["Export"]
    plan_csv = export._plan_csv().read().splitlines()
    assert tuple(plan_csv[0].split(",")) == PLAN_COLUMNS
    assert len(plan_csv) - 1 == len(app.state.result.plan)
    mig_csv = export._migrations_csv().read().splitlines()
    assert tuple(mig_csv[0].split(",")) == MIGRATION_COLUMNS
    assert export.plan_download.filename == "tiny_lyapunov_plan.csv"
    assert not export.plan_download.disabled
    compare_csv = export._compare_csv().read().splitlines()
    assert compare_csv[0].split(",") == list(derive.COMPARE_COLUMNS)
    assert compare_csv[1].startswith("lyapunov,") and len(compare_csv) == 3
    # No figure is a HoloViews Layout: a responsive Layout makes Bokeh's layout loop spin
    # and freezes the browser tab.
    import holoviews as hv

    for view in app.views.values():
        for pane in pn.panel(view).select(pn.pane.HoloViews):
            assert not isinstance(pane.object, hv.Layout)


def test_quote_view_uses_the_state(db: Path) -> None:
    app = create_app(str(db), scenario_name="tiny", policy="lyapunov", save_runs=False)
    view = app.views["Quote"]
    assert view.app.options and view.home.options
    spec = view.spec()
    assert isinstance(spec, JobSpec)
    q = app.state.quote(spec)
    assert q is not None and app.state.last_quote is q
    pn.panel(view).get_root()


def test_widget_defaults_are_the_librarys(state: WorkbenchState) -> None:
    """V and the migration threshold start at LyapunovPolicy's own defaults, not copies."""
    import inspect

    from workbench.policies.lyapunov import LyapunovPolicy

    defaults = inspect.signature(LyapunovPolicy).parameters
    assert WorkbenchState.param.V.default == defaults["V"].default
    assert (WorkbenchState.param.migration_threshold.default
            == defaults["migration_threshold"].default)
    assert state.knobs()["migration_threshold"] == defaults["migration_threshold"].default
    app = create_app(state.db_path, scenario_name="tiny", policy="lyapunov")
    slider = next(w for w in pn.panel(app.sidebar).select(pn.widgets.FloatSlider)
                  if w.label == "Migration threshold")
    assert slider.value == defaults["migration_threshold"].default


@pytest.mark.slow
def test_gantt_has_one_colour_per_datacenter(state: WorkbenchState) -> None:

    res = state.run()
    assert res is not None
    segments = derive.gantt_segments(res.plan)
    overlay = plots.gantt(segments)
    colours = {layer.label: layer.opts.get().kwargs["color"] for layer in overlay}
    assert set(colours) == set(segments["region"])
    assert len(set(colours.values())) == len(colours)
    assert colours == {k: v for k, v in derive.datacenter_colors(segments["region"]).items()}
    # Rows run by first start, and every job has one.
    order = derive.job_order(segments)
    firsts = segments.groupby("job_id")["start"].min()
    assert list(firsts.loc[order]) == sorted(firsts)
    # The tooltip names the job (it once read "59_id": the row number and "_id").
    import holoviews as hv
    from bokeh.models import HoverTool

    tips = [dict(t.tooltips) for t in hv.render(overlay).select(HoverTool)]
    assert tips and all(t["job"] == "@{job_id} (@{app})" for t in tips)


def test_datacenter_colors_are_stable_and_distinct() -> None:
    a = derive.datacenter_colors(["suzhou", "guiyang", "guangzhou", "guiyang"])
    assert list(a) == ["guangzhou", "guiyang", "suzhou"] and len(set(a.values())) == 3
    assert derive.datacenter_colors(["guiyang", "suzhou", "guangzhou"]) == a


def test_grid_in_local_time(state: WorkbenchState) -> None:
    sc = state.scenario
    assert sc is not None
    zones = derive.time_zones(sc.grid)
    assert zones[0] == "UTC" and "Asia/Shanghai" in zones
    utc = derive.grid_long(sc.grid)
    local = derive.grid_long(sc.grid, tz="Asia/Shanghai")
    assert str(local["time"].dt.tz) == "Asia/Shanghai"
    assert (local["time"].dt.tz_convert("UTC") == utc["time"]).all()
    assert (local["time"].iloc[0].hour - utc["time"].iloc[0].hour) % 24 == 8


def test_compare_table_savings_and_gaps_on_equal_work() -> None:
    """Savings against asap-home and the gaps to the bound and the replay are on equal
    work, the one definition of workbench.equal_work; rows in a stable order; counts are
    integers and the currency is a column."""
    from workbench.equal_work import like_for_like

    run = {"cost": 90.0, "carbon_kg": 40.0, "equal_work_cost": 90.0,
           "equal_work_carbon_kg": 40.0, "currency": "CNY", "deadline_misses": 0.0}
    asap = {"cost": 100.0, "carbon_kg": 50.0, "equal_work_cost": 100.0,
            "equal_work_carbon_kg": 50.0, "deadline_misses": 1.0}
    offline = {"cost": 85.0, "carbon_kg": 45.0, "equal_work_cost": 85.0,
               "equal_work_carbon_kg": 45.0}
    bound = {"cost": 78.0, "carbon_kg": 44.0, "kind": "lp-relaxation",
             "equal_work_cost": 80.0, "equal_work_carbon_kg": 44.0}
    table = derive.compare_table("lyapunov", run, {"offline": offline, "asap-home": asap,
                                                   "greedy": asap}, bound)
    # The run, then the policies in the registry's order, whatever order they came in.
    from workbench.policies import POLICY_NAMES
    others = list(table["policy"])[1:]
    assert table["policy"].iloc[0] == "lyapunov"
    assert others == sorted(others, key=POLICY_NAMES.index)
    first = table.iloc[0]
    assert first["saving_pct"] == pytest.approx(10.0)
    assert first["carbon_saving_pct"] == pytest.approx(20.0)
    assert first["above_bound_pct"] == pytest.approx(12.5)
    assert first["above_replay_pct"] == pytest.approx(100 * (90 / 85 - 1))
    cmp = derive.run_comparison("lyapunov", run, {"asap-home": asap, "offline": offline}, bound)
    assert cmp.as_dict() == like_for_like(run, asap, bound, offline).as_dict()
    assert str(table["deadline_misses"].dtype) == "Int64"
    assert (table["currency"] == "CNY").all()
    no_ref = derive.compare_table("lyapunov", run, {})
    assert no_ref["above_bound_pct"].isna().all() and no_ref["saving_pct"].isna().all()


def test_a_saving_that_left_work_undone_says_so() -> None:
    """A run that saved by leaving jobs unfinished or late leads with its saving on equal
    work (the undone work charged) and marks the bill's saving as not like for like; one
    that did not is not marked."""
    from workbench.app.markup import savings_html

    base = {"cost": 100.0, "carbon_kg": 50.0, "equal_work_cost": 100.0,
            "equal_work_carbon_kg": 50.0, "unfinished_charge": 0.0, "jobs_unfinished": 0,
            "deadline_misses": 1}
    late = {"cost": 60.0, "carbon_kg": 40.0, "equal_work_cost": 95.0,
            "equal_work_carbon_kg": 49.0, "unfinished_charge": 35.0, "jobs_unfinished": 36,
            "deadline_misses": 144}
    cmp = derive.run_comparison("lyapunov", late, {"asap-home": base})
    assert cmp.more_unfinished == 36 and cmp.more_misses == 143
    html = savings_html(cmp, "lyapunov", "CNY")
    assert html.index("on equal work") < html.index("The bill alone")
    assert 'id="saving-pct">5.0 %' in html and 'id="saving-bill-pct">40.0 %' in html
    assert "not like for like" in html and "36 more jobs unfinished" in html
    assert "143 more deadline misses" in html and "35.00 CNY here" in html
    fair = {**base, "cost": 90.0, "equal_work_cost": 90.0}
    html = savings_html(derive.run_comparison("lyapunov", fair, {"asap-home": base}),
                        "lyapunov")
    assert "not like for like" not in html and "bill's own saving" in html


def test_quote_table_puts_the_decision_first(state: WorkbenchState) -> None:
    from workbench.app.views.quote import quote_table

    sc = state.scenario
    assert sc is not None
    q = state.quote(JobSpec(app=sc.profiles[0].app, work_samples=1e5,
                            home=sc.datacenters[0].name, deadline_h=6.0))
    assert q is not None
    table = quote_table(q.options, q.currency, "Asia/Shanghai", "fastest")
    assert list(table.columns[:4]) == ["", "datacenter", "GPU", "GPUs"]
    assert f"cost ({q.currency})" in table.columns and len(table) == len(q.options)
    assert "start (Asia/Shanghai)" in table.columns
    # Sorted by what was asked: the fastest option that meets the deadline is marked best.
    ranked = derive.sort_quote(q.options, "fastest")
    ok = ranked[ranked["feasible"]]
    assert ok["finish"].is_monotonic_increasing
    assert table.iloc[0, 0] == ("★ best" if len(ok) and bool(ranked["feasible"].iloc[0])
                                else "")
    cheapest = derive.sort_quote(q.options, "cheapest")
    assert cheapest[cheapest["feasible"]]["cost"].is_monotonic_increasing


def test_charts_do_not_capture_page_scrolling() -> None:
    """No chart starts with wheel zoom active: scrolling the page must scroll the page. No
    chart aligns its frame with its neighbours' (a Gantt's labels would squeeze the others)."""
    import holoviews as hv
    import pandas as pd


    frame = pd.DataFrame({"policy": ["lyapunov", "asap-home"], "cost": [1.0, 2.0]})
    bokeh_plot = hv.render(plots.compare_bars(frame, "cost"))
    assert bokeh_plot.toolbar.active_scroll in (None, "auto")
    assert bokeh_plot.frame_align is False
    assert plots.CALM["active_tools"] == ["pan"]


def test_comparison_bars_are_labelled_html_in_proportion() -> None:
    frame = pd.DataFrame({"policy": ["lyapunov", "asap-home", "offline"],
                          "cost": [50.0, 100.0, float("nan")]})
    html = markup.compare_bars_html(frame, "cost", "cost (CNY)")
    assert "cost (CNY)" in html and "50.00" in html and "100.00" in html and "–" in html
    # To scale from zero: 50 is half of 100 (the longest bar takes BAR_SPAN % of the cell).
    span = markup.BAR_SPAN
    assert f"width:{span / 2:.2f}%" in html and f"width:{span:.2f}%" in html
    assert "width:0.00%" in html and html.count("flex:none") == 3
    assert "#9e9e9e" in html and "#1f6f8b" in html  # asap-home grey, the run dark


def test_a_locked_store_is_shown_to_the_user(tmp_path, store_lock) -> None:
    """Opened while another process holds the store's lock, the app says so on screen (not
    only in the server log), and a Run explains why no scenario is loaded."""
    from workbench.app.state import WorkbenchState
    from workbench.model import ScenarioError
    from workbench.store import Store

    db = tmp_path / "wb.duckdb"
    with Store(db):
        pass
    store_lock.take(db)
    try:
        state = WorkbenchState(db_path=str(db))
        assert "locked by another process" in state.store_error
        assert state.message_kind == "danger" and "locked" in state.message
        with pytest.raises(ScenarioError, match="no scenario loaded: store .* is locked"):
            state.planning_scenario()
    finally:
        store_lock.release()
    state.refresh_scenarios()
    assert state.store_error == "" and state.scenario is not None


@pytest.mark.slow
def test_run_carries_its_attribution_and_the_forecast_is_honest(state: WorkbenchState) -> None:
    from workbench.app.state import HONEST_FORECAST

    assert WorkbenchState.param.forecast_mode.default == HONEST_FORECAST
    state.policy = "lyapunov"
    res = state.run()
    assert res is not None and res.meta["forecast_mode"] != "perfect"
    att = res.meta["attribution"]
    base = state.baselines["asap-home"]
    assert sum(att["cost"].values()) == pytest.approx(base["cost"] - res.metrics["cost"])
    chart = markup.attribution_waterfall(att["cost"], "saved (CNY)", "saving")
    assert chart.count('class="wb-waterfall-bar"') == 5  # four parts and the total
    total = base["cost"] - res.metrics["cost"]
    assert f"saving (total): {total:+,.2f} saved (CNY)" in chart


def test_waterfall_bars_float_from_the_running_total() -> None:
    """Each part starts where the previous ended; a cost (negative part) is red and goes
    down; the total is drawn from zero; the scale spans the lowest and highest level."""
    html = markup.attribution_waterfall(
        {"efficiency": 60.0, "temporal": 40.0, "spatial": 0.0, "movement": -20.0},
        "saved (CNY)", "t")
    bars = re.findall(r'bottom:([\d.]+)%;height:max\(([\d.]+)%,1px\);background:(#\w+)',
                      html)
    # levels 0 -> 60 -> 100 -> 100 -> 80, total 80; scale 0..100
    assert [(float(b), float(h), c) for b, h, c in bars] == [
        (0.0, 60.0, "#2ca02c"), (60.0, 40.0, "#2ca02c"), (100.0, 0.0, "#2ca02c"),
        (80.0, 20.0, "#d62728"), (0.0, 80.0, "#1f6f8b")]
    assert "+60.00" in html and "-20.00" in html and "+80.00" in html
    assert "no attribution" in markup.attribution_waterfall({}, "saved (CNY)", "t")


def test_a_missed_cap_is_a_warning_beside_the_results() -> None:
    from workbench.app.markup import caps_html

    cap = {"scope": "all", "cap_kg": 10.0}
    missed = caps_html([{**cap, "carbon_kg": 11.4, "met": False}], {"power_cap_violations": 0})
    assert 'id="metrics-cap-warning"' in missed and "Carbon cap missed" in missed
    assert "+14.0 %" in missed
    met = caps_html([{**cap, "carbon_kg": 9.0, "met": True}], {"power_cap_violations": 0})
    assert "metrics-cap-met" in met and "warning" not in met
    power = caps_html([], {"power_cap_violations": 3, "power_cap_kw": 5.0})
    assert "Power cap missed" in power
    assert caps_html([], {"power_cap_violations": 0}) == ""


def test_typed_knobs_are_checked_and_block_the_run(state: WorkbenchState) -> None:
    """V = -5, 0, 1e308 or text are refused with a reason; the last valid V stays and Run
    refuses until the field is fixed (never a run on a value the operator does not see)."""
    before = state.V
    for text in ("-5", "0", "1e308", "abc", ""):
        assert state.enter("V", text), text
        assert state.V == before and "V" in state.blocking_errors()
    assert state.run() is None
    assert state.message_kind == "danger" and "V" in state.message
    assert state.enter("V", "2.5") == "" and state.V == 2.5 and not state.blocking_errors()
    # A cap of 0 is refused, but only matters while a global cap is chosen.
    assert "a positive number" in state.enter("carbon_cap_kg", "0")
    assert not state.blocking_errors()
    state.cap_mode = "global"
    assert "carbon_cap_kg" in state.blocking_errors()
    state.enter("carbon_cap_kg", "50")
    assert state.carbon_cap_kg == 50.0 and not state.blocking_errors()


def test_sidebar_run_button_follows_the_errors(db: Path) -> None:
    app = create_app(str(db), scenario_name="tiny", policy="lyapunov", save_runs=False)
    bar = app.sidebar
    assert not bar.run_button.disabled
    bar.v_input.value_input = "-5"
    assert bar.run_button.disabled and bar.error_text.visible
    assert "out of range" in app.state.input_errors["V"]
    bar.v_input.value_input = "3"
    assert not bar.run_button.disabled and app.state.V == 3.0


def test_knobs_the_policy_does_not_take_are_not_offered(db: Path) -> None:
    """The look-ahead planner takes no V and no migration threshold: their fields are hidden
    (with a note saying why) rather than shown and silently ignored."""
    app = create_app(str(db), scenario_name="tiny", policy="lyapunov", save_runs=False)
    bar = app.sidebar
    assert bar.v_input.visible and bar.v_slider.visible and bar.threshold.visible
    assert not bar.knobs_note.visible
    app.state.policy = "lookahead"
    assert not (bar.v_input.visible or bar.v_slider.visible or bar.threshold.visible)
    assert bar.knobs_note.visible and "lookahead" in bar.knobs_note.object
    app.state.policy = "threshold"
    assert bar.threshold.visible and bar.v_input.visible and not bar.knobs_note.visible


def test_missed_cap_and_unfinished_jobs_are_warnings(state: WorkbenchState) -> None:
    state.param.update(cap_mode="global", carbon_cap_kg=0.01, baseline_policies=[])
    res = state.run()
    assert res is not None
    caps = derive.cap_status(res)
    assert caps[0]["scope"] == "all" and not caps[0]["met"]
    warnings = derive.run_warnings(res)
    assert any(w.startswith("carbon cap missed") for w in warnings)
    assert state.message_kind == "warning" and "carbon cap missed" not in state.message
    assert "warnings: see “Warnings of this run”" in state.message


def test_each_warning_of_a_run_is_shown_once(state: WorkbenchState) -> None:
    """The same warning was on screen four times (the message box repeated the banner's
    list, the budget's note and verdict repeated the simulator's miss): the banner lists
    each fact once and the message box only counts them."""
    from workbench.app.markup import banner_html, esc

    state.param.update(policy="lookahead", cap_mode="global", carbon_cap_kg=0.01,
                       baseline_policies=[])
    res = state.run()
    assert res is not None
    warnings = derive.run_warnings(res)
    html = banner_html(state.run_info, False, warnings, "UTC")
    assert sum("carbon cap missed" in w or "MISSED" in w for w in warnings) == 1, warnings
    assert len(set(warnings)) == len(warnings) >= 2
    for w in warnings:
        head = w[:40]
        assert html.count(esc(head)) == 1 and head not in state.message, (w, state.message)
    assert f"{len(warnings)} warnings" in state.message


def test_cancel_stops_the_run_and_keeps_the_previous(state: WorkbenchState) -> None:
    first = state.run()
    assert first is not None

    def cancel_soon(n: int, orig=state.run_progress.tick) -> None:
        orig(n)
        state.cancel()

    state.running = True  # as run() sets it; cancel() only acts on a running computation
    state.run_progress.tick = cancel_soon  # type: ignore[method-assign]
    outcome = state.compute()
    state.running = False
    assert outcome.cancelled and outcome.result is None
    state.apply(outcome)
    assert state.result is first and "cancelled" in state.message


@pytest.mark.slow
def test_app_opens_on_the_latest_stored_run_and_compares(tmp_path: Path, seed3: Scenario) -> None:
    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        store.save_scenario(_tiny(seed3))
    s = WorkbenchState(db_path=str(db), scenario_name="tiny", policy="lyapunov",
                       baseline_policies=["asap-home"])
    assert s.result is None and s.runs_table is not None and s.runs_table.empty
    for v in (0.5, 5.0):
        s.enter("V", str(v))
        assert s.run() is not None
    s.param.update(cap_mode="global")
    s.enter("carbon_cap_kg", "1")
    capped = s.run()
    assert capped is not None
    # The V trade-off joins only runs that differ from the shown run in V alone: the capped
    # run has no partner.
    assert s.tradeoff is None
    mine = s.runs_table[s.runs_table["status"] != "baseline"]
    assert len(mine) == 3 and (s.runs_table["status"] == "baseline").sum() == 1
    # A new session opens on the newest stored run, with its knobs and its comparison.
    app = create_app(str(db), scenario_name="tiny", policy="lyapunov",
                     baseline_policies=["asap-home"])
    t = app.state
    assert t.result is not None and t.run_info["run_id"] == mine["run_id"].iloc[0]
    assert t.run_info["knobs"]["carbon_cap_kg"] == 1.0 and "asap-home" in t.baselines
    assert t.result.metrics["cost"] == pytest.approx(capped.metrics["cost"])
    assert len(t.result.plan) == len(capped.plan)
    # Its attribution is the one shown right after the run (against the same stored plan).
    for part in ("cost", "carbon_kg"):
        assert t.result.meta["attribution"][part] == pytest.approx(
            capped.meta["attribution"][part], abs=1e-9)
    # The sidebar shows the knobs of the run on screen: Run repeats it.
    assert (t.cap_mode, t.carbon_cap_kg, t.V) == ("global", 1.0, 5.0)
    # Loading the uncapped V = 5 run brings back its trade-off with V = 0.5.
    t.load_run(str(mine["run_id"].iloc[1]))
    assert t.cap_mode == "none" and "carbon_cap_kg" not in t.knobs()
    assert t.tradeoff is not None and list(t.tradeoff["V"]) == [0.5, 5.0]
    runs_view = app.views["Runs"]
    runs_view.table.selection = [0, 1]
    runs_view._compare(None)
    assert t.compare_ids == list(mine["run_id"].iloc[:2])
    pn.panel(runs_view).get_root()
    with Store(db) as store:
        from workbench.runs import compare_frame

        frame = compare_frame(store, t.compare_ids, {"tiny": t.scenario})
    saved = frame.loc["saving against asap-home (CNY)"]
    assert saved.iloc[0] == pytest.approx(sum(capped.meta["attribution"]["cost"].values()))
    assert "  from spatial (CNY)" in frame.index and "  from movement (kg)" in frame.index
    first, second = t.compare_ids
    t.rename_run(first, "capped")
    assert "capped" in set(t.runs_table["name"].dropna())
    t.delete_runs([first])
    assert len(t.runs_table) == 3 and t.compare_ids == [second]
    # Delete ticked asks first: one press says what would go, the second deletes.
    runs_view.table.selection = [0]
    doomed = runs_view.ticked()
    runs_view._delete(None)
    assert len(t.runs_table) == 3 and "again" in runs_view.hint.object
    runs_view._delete(None)
    assert len(t.runs_table) == 2 and doomed[0] not in set(t.runs_table["run_id"])
    assert "Deleted 1 run" in runs_view.hint.object


def test_migration_reasons_in_words(state: WorkbenchState) -> None:
    sc = state.scenario
    assert sc is not None
    res = state.run()
    assert res is not None
    if res.migrations.empty:
        pytest.skip("no migration in this tiny run")
    reasons = derive.migration_reasons(res.migrations, res.plan, sc)
    assert len(reasons) == len(res.migrations)
    assert all(r.startswith("price ") and f"{sc.currency}/kWh" in r and "carbon" in r
               for r in reasons)
    # A reason never contradicts itself: a move to dirtier power is not "for the carbon".
    for r in reasons:
        assert not ("more carbon" in r and "for the lower carbon" in r), r
        assert not ("less carbon" in r and "nor cleaner" in r), r


def test_gantt_filter_group_and_every_row_labelled(state: WorkbenchState) -> None:

    res = state.run()
    assert res is not None
    seg = derive.gantt_segments(res.plan)
    one = str(seg["job_id"].iloc[0])
    assert set(derive.filter_segments(seg, search=one.upper())["job_id"]) == {
        j for j in seg["job_id"] if one in j}
    late = seg["start"].max()
    assert (derive.filter_segments(seg, start=late)["end"] > late).all()
    groups = derive.job_groups(seg, "pool")
    assert set(groups.index) == set(seg["job_id"]) and all("/" in g for g in groups)
    rows = derive.job_order(seg)
    overlay = plots.gantt(seg, rows, currency="CNY", groups=groups)
    ticks = overlay.opts.get().kwargs["yticks"]
    assert len(ticks) == len(rows) and all(lbl.endswith(j) for (_, lbl), j in zip(
        sorted(ticks, reverse=True), rows, strict=True))


@pytest.mark.slow
def test_a_reopened_run_keeps_its_hindsight_bound(tmp_path: Path, seed3: Scenario) -> None:
    db = tmp_path / "bound.duckdb"
    with Store(db) as store:
        store.save_scenario(first_hours(seed3, 6, arrivals_h=2, name="six"))
    s = WorkbenchState(db_path=str(db), scenario_name="six", policy="greedy",
                       baseline_policies=["asap-home", "offline"])
    res = s.run()
    assert res is not None and res.meta["bound"]["kind"]
    t = WorkbenchState(db_path=str(db), scenario_name="six")
    assert t.result is not None and t.run_info["run_id"] == res.meta["run_id"]
    assert t.result.meta["bound"] == {k: pytest.approx(v) if isinstance(v, float) else v
                                      for k, v in res.meta["bound"].items()}
    assert "attribution" in t.result.meta


@pytest.mark.slow
def test_comparisons_shared_by_sessions_follow_a_reimport(tmp_path: Path,
                                                          seed3: Scenario) -> None:
    """Comparison runs are kept for every session while the scenario's stored rows are the
    same; a re-import of equal size but other prices runs them again."""
    db = tmp_path / "fp.duckdb"
    sc = first_hours(seed3, 6, arrivals_h=2, name="six")
    with Store(db) as store:
        store.save_scenario(sc)
    s = WorkbenchState(db_path=str(db), scenario_name="six", policy="greedy",
                       baseline_policies=["asap-home"], save_runs=False)
    assert s.run() is not None and [r["policy"] for r in s.progress_rows] == ["greedy",
                                                                              "asap-home"]
    same = WorkbenchState(db_path=str(db), scenario_name="six", policy="greedy",
                          baseline_policies=["asap-home"], save_runs=False)
    assert same.fingerprint == s.fingerprint and same.scenario is s.scenario
    assert same.run() is not None and [r["policy"] for r in same.progress_rows] == ["greedy"]
    with Store(db) as store:
        grid = store.con.execute("SELECT * FROM grid_series").df()
        n = len(grid)
        store.write_grid_series(grid.assign(price_per_kwh=grid["price_per_kwh"] * 1.5))
        assert store.con.execute("SELECT count(*) FROM grid_series").fetchone()[0] == n
    again = WorkbenchState(db_path=str(db), scenario_name="six", policy="greedy",
                           baseline_policies=["asap-home"], save_runs=False)
    assert again.fingerprint != s.fingerprint and again.scenario is not s.scenario
    res = again.run()
    assert res is not None and [r["policy"] for r in again.progress_rows] == ["greedy",
                                                                              "asap-home"]
    assert again.baselines["asap-home"]["cost"] != pytest.approx(
        s.baselines["asap-home"]["cost"])


def test_quote_arrival_and_forecast_origins_follow_the_time_zone(db: Path) -> None:
    """One time-zone choice for every tab: the Quote's arrival picker and the Grid's
    forecast issue times are named and bounded in the sidebar's zone."""
    from workbench.app.views import ForecastPane

    app = create_app(str(db), scenario_name="tiny", save_runs=False)
    state, quote = app.state, app.views["Quote"]
    state.tz = "UTC"
    start_utc = pd.Timestamp(quote.arrival.start)
    pane = ForecastPane(state=state)
    zone = next(z for z in state.param.tz.objects if z != "UTC")
    state.tz = zone
    assert zone in quote.arrival.name
    assert pd.Timestamp(quote.arrival.start) == (
        start_utc.tz_localize("UTC").tz_convert(zone).tz_localize(None))
    assert pane.origin.options and all(name.endswith(zone) for name in pane.origin.options)


def test_a_typed_percentage_cap_stays_a_percentage(tmp_path: Path, seed3: Scenario) -> None:
    """After a run, the app rewrote a typed cap of "10%" into its kg ("979.707"): a
    stored run keeps the percentage beside the kg, and reopening it (a new session opens
    the latest run) shows "10%" again."""
    from workbench.app.views.sidebar import Sidebar

    db = tmp_path / "wb.duckdb"  # its own store: the runs stored here reopen below
    with Store(db) as store:
        store.save_scenario(_tiny(seed3))
    s = WorkbenchState(db_path=str(db), scenario_name="tiny", policy="lookahead",
                       baseline_policies=["asap-home"], save_runs=True)
    s.cap_mode = "global"
    assert s.enter("carbon_cap_kg", "10%") == ""
    res = s.run()
    assert res is not None and s.carbon_cap_pct == 10.0
    again = WorkbenchState(db_path=str(db), scenario_name="tiny", policy="lookahead",
                           baseline_policies=["asap-home"], save_runs=False)
    assert again.run_info.get("run_id") == s.run_info.get("run_id")
    assert again.cap_mode == "global" and again.carbon_cap_pct == 10.0
    shown = Sidebar(state=again).caps.objects[0]
    assert shown.value == "10%"


def test_follow_renewables_without_supply_is_said_not_run(state: WorkbenchState) -> None:
    """On a scenario without on-site supply, follow-renewables would repeat asap-home: as
    the policy, Run is disabled with the reason; as a comparison, it is not run, and the
    sidebar says so under Compare with."""
    from workbench.app.views.sidebar import Sidebar

    bar = Sidebar(state=state)
    state.policy = "follow-renewables"
    assert "policy" in state.blocking_errors() and bar.run_button.disabled
    assert "would run exactly as asap-home" in bar.error_text.object
    state.param.update(policy="greedy", baseline_policies=["asap-home", "follow-renewables"])
    assert "policy" not in state.blocking_errors()
    res = state.run()
    assert res is not None and set(state.baselines) == {"asap-home"}
    assert "follow-renewables" not in state.message  # no note of a failure: not run
    notes = [o for o in bar.__panel__().objects if "wb-not-compared" in (o.css_classes or [])]
    assert notes and "*follow-renewables* is not run here" in notes[0].object
