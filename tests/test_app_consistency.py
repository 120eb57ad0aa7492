"""The app consistent with itself and with the CLI (issue 24): its messages follow the
sidebar, it opens on the newest run of any scenario in the zone most sites are in, takes a
carbon cap as the CLI does, and the Migrations tab shows the migrations CSV's numbers."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from workbench import Store
from workbench.app import WorkbenchState, derive
from workbench.app.markup import savings_html
from workbench.app.shared import SharedCache
from workbench.app.views.migrations import MigrationsView
from workbench.io.plan_csv import read_migrations_csv, write_migrations_csv
from workbench.model import Scenario
from workbench.runner import RunSpec, run_spec, save_outcome
from workbench.scenarios import first_hours


def _six(seed3: Scenario, name: str = "six") -> Scenario:
    return first_hours(seed3, 6, arrivals_h=2, name=name)


def _headline(s: WorkbenchState) -> str:
    res = s.result
    assert res is not None
    cmp = derive.run_comparison(res.policy, res.metrics, s.baselines, s.bound)
    return savings_html(cmp, res.policy, "CNY", s.missing_references())


@pytest.mark.slow
def test_messages_follow_what_compare_with_holds(tmp_path: Path, seed3: Scenario) -> None:
    """Item 2: a stored run opened without its hindsight plan says offline is selected but
    not run (press Run), not "add offline"; deselected, it says add it; a run whose
    comparisons were cancelled asks for nothing that is already selected."""
    db = tmp_path / "msg.duckdb"
    sc = _six(seed3)
    with Store(db) as store:
        store.save_scenario(sc)
    save_outcome(run_spec(RunSpec("six", "greedy"), sc), db)  # as `workbench plan` stores
    s = WorkbenchState(db_path=str(db), shared=SharedCache())  # every comparison selected
    assert "offline" in s.baseline_policies and s.result is not None
    html = _headline(s)
    assert "offline is selected under Compare with but has not run" in html
    assert "add offline" not in html
    s.baseline_policies = [b for b in s.baseline_policies if b != "offline"]
    assert "add offline under Compare with" in _headline(s)
    # Cancel during the comparisons: the run stands, its missing asap-home is selected.
    s.baseline_policies = ["asap-home", "offline"]
    s.policy = "greedy"

    def cancel_in_comparisons(n: int, orig=s.run_progress.tick) -> None:
        orig(n)
        if any(r["policy"] == "asap-home" and r["started_s"] is not None
               for r in s.run_progress._rows):
            s.cancel()

    s.running = True
    s.run_progress.tick = cancel_in_comparisons  # type: ignore[method-assign]
    outcome = s.compute()
    s.running = False
    assert outcome.result is not None and any("cancelled" in n for n in outcome.notes)
    s.apply(outcome)
    assert "asap-home" not in s.baselines
    html = _headline(s)
    assert "asap-home is selected under Compare with but has not run" in html
    from workbench.app.views.metrics import MetricsView

    empty = MetricsView(state=s)._attribution()
    assert "asap-home is selected under Compare with" in empty.object
    assert "add" not in empty.object.split("asap-home is selected")[0]


@pytest.mark.slow
def test_the_app_opens_on_the_newest_run_of_any_scenario(tmp_path: Path,
                                                          seed3: Scenario) -> None:
    """Item 4: after a second scenario is built and planned, a visitor lands on its newest
    run, not on the alphabetically first scenario's empty page."""
    db = tmp_path / "two.duckdb"
    a, z = _six(seed3, "aaa-first"), _six(seed3, "zzz-latest")
    with Store(db) as store:
        store.save_scenario(a)
        store.save_scenario(z)
    first = save_outcome(run_spec(RunSpec("aaa-first", "greedy"), a), db).run_ids[-1]
    latest = save_outcome(run_spec(RunSpec("zzz-latest", "greedy"), z), db).run_ids[-1]
    s = WorkbenchState(db_path=str(db), shared=SharedCache())
    assert s.scenario_name == "zzz-latest" and s.run_info["run_id"] == latest
    assert s.result is not None and first != latest


def test_times_in_defaults_to_the_zone_most_sites_are_in(seed3: Scenario) -> None:
    import dataclasses

    assert derive.default_zone(seed3.datacenters) == "Asia/Shanghai"
    zones = ["America/Los_Angeles", "America/Chicago", "America/New_York", "Europe/Berlin"]
    dcs = [dataclasses.replace(d, timezone=z) for d, z in zip(
        [*seed3.datacenters, seed3.datacenters[0]], zones, strict=True)]
    when = pd.Timestamp("2023-07-10", tz="UTC")
    assert derive.default_zone(dcs, when) == "America/New_York"
    two = [dataclasses.replace(d, timezone="Europe/Berlin") for d in dcs[:2]]
    assert derive.default_zone([*two, *dcs[2:3]], when) == "Europe/Berlin"


def test_warnings_are_written_in_the_chosen_zone() -> None:
    text = ("imagenet-18: horizon ended with 55% left (deadline 2023-07-18 12:47 UTC is after "
            "the horizon); slot 3 (2023-07-10 00:45 UTC): fallback")
    ny = derive.in_zone(text, "America/New_York")
    assert "2023-07-18 08:47 America/New_York" in ny and "UTC" not in ny
    assert "2023-07-09 20:45 America/New_York" in ny
    assert derive.in_zone(text, "UTC") == text


@pytest.mark.slow
def test_a_percentage_cap_runs_against_asap_homes_carbon(tmp_path: Path,
                                                          seed3: Scenario) -> None:
    """Item 5: 20% in the sidebar is the CLI's --carbon-cap 20%: a cap 20 % below the
    asap-home run's carbon, which runs first when it is not shared yet."""
    db = tmp_path / "pct.duckdb"
    with Store(db) as store:
        store.save_scenario(_six(seed3))
    s = WorkbenchState(db_path=str(db), scenario_name="six", policy="lookahead",
                       baseline_policies=["wait-for-cheap"], shared=SharedCache(),
                       save_runs=False)
    s.cap_mode = "global"
    assert s.enter("carbon_cap_kg", "20%") == ""
    res = s.run()
    assert res is not None, s.message
    cap = res.meta["knobs"]["carbon_cap_kg"]
    asap = s.shared.comparisons(s.run_request().key, ["asap-home"])["asap-home"]
    assert cap == pytest.approx(0.8 * float(asap.metrics["carbon_kg"]))
    spec = run_spec(RunSpec("six", "lookahead", caps=s.caps()), s.planning_scenario())
    assert spec.carbon_cap_kg == pytest.approx(cap)  # the same cap as the runner's


@pytest.mark.slow
def test_the_migrations_tab_shows_the_csvs_numbers(tmp_path: Path, seed3: Scenario) -> None:
    """Item 3: GB moved (dataset and checkpoint) and transfer seconds as the migrations CSV
    has them, rounded for the screen."""
    db = tmp_path / "mig.duckdb"
    sc = first_hours(seed3, 24, arrivals_h=12, name="day")
    with Store(db) as store:
        store.save_scenario(sc)
    save_outcome(run_spec(RunSpec("day", "lookahead"), sc), db)
    s = WorkbenchState(db_path=str(db), shared=SharedCache(), tz="UTC")
    res = s.result
    assert res is not None and len(res.migrations) > 0
    buf = io.StringIO()
    write_migrations_csv(res.migrations, buf)
    csv = read_migrations_csv(io.StringIO(buf.getvalue()))
    view = MigrationsView(state=s)
    table = [o for o in view._content().objects if hasattr(o, "value")
             and "GB moved" in getattr(o.value, "columns", [])][0].value
    assert len(table) == len(csv)
    assert table["GB moved"].tolist() == pytest.approx(csv["transfer_gb"].round(2).tolist())
    assert table["transfer (s)"].tolist() == pytest.approx(csv["transfer_s"].round(2).tolist())
    assert (csv["dataset_gb"] > 0).any()  # datasets travel, and are counted
    assert table["what moved"].tolist() == csv["moved"].tolist()


def test_one_colour_per_datacenter_in_every_chart(seed3: Scenario) -> None:
    """Item 7: guangzhou has one colour in the Gantt (whichever sites a page shows), the
    occupancy chart (each of its pools), the flows and the grid curves (its region)."""
    from workbench.app import plots

    sc = _six(seed3)
    colors = derive.site_colors(sc)
    assert len({colors[d.name] for d in sc.datacenters}) == len(sc.datacenters)
    t0 = pd.Timestamp(sc.start)
    seg = pd.DataFrame({"job_id": ["a", "b"], "kind": "training", "region": ["suzhou"] * 2,
                        "gpu_type": "A100", "n_gpus": 1, "batch_size": 64, "start": t0,
                        "end": t0 + pd.Timedelta(hours=1), "slots": 4, "energy_kwh": 1.0,
                        "cost": 1.0, "carbon_kg": 1.0, "actions": "run"})
    gantt = {layer.label: layer.opts.get().kwargs["color"]
             for layer in plots.gantt(seg, colors=colors)}
    assert gantt == {"suzhou": colors["suzhou"]}  # alone on its page, still its colour
    occ = pd.DataFrame({"time": [t0] * len(sc.pools),
                        "pool": [f"{p.datacenter}/{p.gpu_type}" for p in sc.pools],
                        "gpus_busy": 1.0})
    lines = [layer for layer in plots.occupancy(occ, colors=colors)
             if isinstance(layer.label, str) and "/" in layer.label]
    for layer in lines:
        assert layer.opts.get().kwargs["color"] == colors[layer.label.split("/")[0]]
    dashes = [layer.opts.get().kwargs["line_dash"] for layer in lines
              if layer.label.startswith("guangzhou/")]
    assert len(dashes) == len(set(dashes)) == 2  # its two pools told apart by line style
    flow = pd.DataFrame({"from_region": ["guangzhou"], "to_region": ["guiyang"],
                         "migrations": [1], "gb": [1.0], "kwh": [2.0]})
    bars = plots.flows(flow, "gb", colors)
    assert list(bars.data["color"]) == [colors["guiyang"]]
    grid = derive.grid_long(sc.grid)
    curves = {c.label: c.opts.get().kwargs["color"]
              for c in plots.grid_curves(grid, "price_per_kwh", "CNY", colors)}
    for d in sc.datacenters:
        assert curves[d.region] == colors[d.name]


def test_the_forecast_chart_names_its_variable_and_ends_with_the_data() -> None:
    from workbench.app import plots

    times = pd.date_range("2025-07-10", periods=24, freq="h")
    frame = pd.DataFrame({"time": times, "truth": 1.0, "q10": 0.5, "q50": 1.0, "q90": 1.5})
    fig = plots.forecast_band(frame, "price_per_kwh", "guangdong", "Thu", "CNY")
    opts = fig.opts.get().kwargs
    assert opts["ylabel"] == "price (CNY/kWh)"
    assert opts["xlim"] == (times[0], times[-1])


def test_the_quote_form_names_the_currency_of_its_carbon_price(tmp_path: Path,
                                                               seed3: Scenario) -> None:
    from workbench.app.views.quote import QuoteView

    db = tmp_path / "q.duckdb"
    with Store(db) as store:
        store.save_scenario(_six(seed3))
    s = WorkbenchState(db_path=str(db), scenario_name="six", shared=SharedCache())
    assert QuoteView(state=s).carbon_price.label == "carbon price (CNY per kg CO2)"


@pytest.mark.slow
def test_a_session_closed_mid_run_gets_nothing_and_the_run_is_stored(
        tmp_path: Path, seed3: Scenario) -> None:
    """Item 8: a tab closed during a run publishes nothing more to its session (each message
    to a closed connection was a warning in the server's log); the run finishes and is
    stored, so the next visitor opens on it."""
    import asyncio

    db = tmp_path / "closed.duckdb"
    with Store(db) as store:
        store.save_scenario(_six(seed3))
    s = WorkbenchState(db_path=str(db), scenario_name="six", policy="greedy",
                       baseline_policies=["asap-home"], shared=SharedCache())
    assert s.result is None
    shown: list[int] = []

    def close_soon(n: int, orig=s.run_progress.tick) -> None:
        orig(n)
        if not s.closed and s.run_progress._done >= 2:
            s.close_session()
            shown.append(s.progress)

    s.run_progress.tick = close_soon  # type: ignore[method-assign]
    res = asyncio.run(s.run_async())
    assert res is not None and s.closed
    assert s.result is None and s.progress == shown[0]  # nothing published after the close
    t = WorkbenchState(db_path=str(db), shared=SharedCache())
    assert t.result is not None and t.result.policy == "greedy"


def test_served_progress_leaves_from_the_sessions_loop(tmp_path: Path,
                                                        seed3: Scenario) -> None:
    """Served, the worker thread's progress waits for SessionPublisher.flush (the session's periodic
    callback on its event loop): nothing is sent to the browser from the worker thread."""
    import threading

    db = tmp_path / "flush.duckdb"
    with Store(db) as store:
        store.save_scenario(_six(seed3))
    s = WorkbenchState(db_path=str(db), scenario_name="six", shared=SharedCache())
    s.publisher.defer()
    seen: list[int] = []
    s.param.watch(lambda e: seen.append(threading.get_ident()), "progress")
    worker = threading.Thread(target=lambda: s.run_progress.begin(["greedy"], 10, "go") or [
        s.run_progress.tick(1) for _ in range(10)])
    worker.start()
    worker.join()
    assert seen == [] and s.progress == 0
    s.publisher.flush()
    assert s.progress == 10 and seen == [threading.get_ident()]
