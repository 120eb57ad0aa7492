"""Grid events: parsed and checked like every input, unseen before their notice, kept by
the planners, held by the sites, reported against the same run without them and billed;
and the flexibility envelope read off the plan."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest

from workbench.caps import Caps
from workbench.cli import main
from workbench.events import GridEvent, check_events, import_limits_kw, parse_event
from workbench.flexibility import OFFER_COLUMNS, Envelope, offers
from workbench.runner import RunSpec, SpecError, run_spec, simulate_spec
from workbench.scenarios import build_seed3, first_hours
from workbench.schema import site_key
from workbench.sim.results import site_floors_kw
from workbench.supply import Battery


@pytest.fixture(scope="module")
def short():
    """seed3's first two days."""
    return first_hours(build_seed3(), 48.0)


@pytest.fixture(scope="module")
def with_battery(short):
    """seed3's first two days with a 200 kWh, 40 kW battery at guangzhou."""
    bat = Battery("gz-bat", "guangzhou", energy_kwh=200.0, power_kw=40.0)
    return replace(short, supply=replace(short.supply, batteries=(bat,)))


def test_an_event_is_parsed_from_its_text_and_bad_text_says_the_form() -> None:
    ev = parse_event("guangzhou,2025-07-14T14:00,3,60,4")
    assert (ev.datacenter, ev.hours, ev.limit_kw, ev.notice_hours) == ("guangzhou", 3.0,
                                                                      60.0, 4.0)
    cut = parse_event("suzhou,30,3,25%")
    assert cut.cut_pct == 25.0 and cut.limit_kw is None and cut.start == 30.0
    assert cut.notice_hours == 2.0
    for bad, says in (("guangzhou,30,3", "DATACENTER,START"), ("g,30,x,60", "HOURS"),
                      ("g,30,3,lots", "LIMIT"), ("g,30,-3,60", "hours must be"),
                      ("g,yesterday,3,60", "ISO time"), ("g,30,3,150%", "cut_pct")):
        with pytest.raises(ValueError, match=says):
            parse_event(bad)


def test_events_are_checked_against_the_scenario_with_the_numbers(short) -> None:
    floors = site_floors_kw(short)
    ok = check_events(short, [GridEvent("guangzhou", 10.0, 3.0, limit_kw=60.0)], floors)
    assert ok[0].start == short.start + timedelta(hours=10)
    with pytest.raises(ValueError, match="unknown datacenter 'mars'"):
        check_events(short, [GridEvent("mars", 10.0, 3.0, limit_kw=60.0)], floors)
    with pytest.raises(ValueError, match="outside the horizon"):
        check_events(short, [GridEvent("guangzhou", 60.0, 3.0, limit_kw=60.0)], floors)
    with pytest.raises(ValueError, match=r"below the 5\d\.\d\d kW guangzhou draws"):
        check_events(short, [GridEvent("guangzhou", 10.0, 3.0, limit_kw=20.0)], floors)


def test_no_policy_sees_an_event_before_its_notice(short) -> None:
    ev = check_events(short, [GridEvent("suzhou", 10.0, 3.0, limit_kw=40.0,
                                        notice_hours=2.0)])[0]
    told = ev.known_from(short)
    assert told == 8 * 4  # 15-minute slots: two hours before the start
    before = import_limits_kw(short, [ev], np.full(3, np.inf), known_at=told - 1)
    after = import_limits_kw(short, [ev], np.full(3, np.inf), known_at=told)
    assert np.isinf(before).all()
    a, b = ev.slots(short)
    assert (a, b) == (40, 52) and np.all(after[a:b, 2] == 40.0) and np.isinf(after[:a]).all()


def test_the_stored_caps_hold_the_events() -> None:
    caps = Caps(power_kw=90.0, events=(GridEvent("suzhou", 10.0, 3.0, limit_kw=40.0,
                                                 payment_per_kwh=1.5),))
    back = Caps.from_stored(json.loads(json.dumps(caps.knobs())))
    assert back == caps and hash(back) == hash(caps)
    assert "1 grid event" in caps.label


@pytest.mark.slow
def test_the_lookahead_keeps_an_event_and_the_run_reports_and_bills_it(short) -> None:
    ev = GridEvent("guangzhou", 24.0, 3.0, cut_pct=10.0, notice_hours=2.0,
                   payment_per_kwh=2.0)
    out = run_spec(RunSpec(short.name, baseline=False, caps=Caps(events=(ev,))), short)
    row, = out.result.meta["grid_events"]
    assert not any("fallback" in w for w in out.result.warnings)
    assert row["met"] and row["max_import_kw"] <= row["limit_kw"] * (1 + 1e-6)
    assert row["limit_kw"] == pytest.approx(row["planned_import_kw"] * 0.9)
    assert row["new_misses"] == [] and row["shed_kwh"] > 0
    m = out.result.metrics
    assert m["bill_event_payment"] == pytest.approx(2.0 * row["shed_kwh"])
    assert m["bill_event_payment:guangzhou"] == pytest.approx(m["bill_event_payment"])
    parts = (m["bill_energy"] + m["bill_ppa"] - m["bill_export_credit"] + m["bill_demand"]
             + m["bill_capacity"] - m["bill_event_payment"] + m["bill_event_penalty"])
    assert m["bill_total"] == pytest.approx(parts)
    assert m["cost"] == pytest.approx(m["bill_total"] - m["bill_no_jobs_total"])


@pytest.mark.slow
def test_the_attribution_says_what_the_events_paid_and_the_parts_add_up(short) -> None:
    ev = GridEvent("guangzhou", 24.0, 3.0, cut_pct=8.0, notice_hours=2.0,
                   payment_per_kwh=1.5)
    out = run_spec(RunSpec(short.name, baseline=True, caps=Caps(events=(ev,))), short)
    assert out.baseline is not None and out.attribution is not None
    row, = out.result.meta["grid_events"]
    parts = out.attribution["cost"]
    assert parts["events"] == pytest.approx(1.5 * row["shed_kwh"])  # a credit saves
    saving = float(out.baseline.metrics["cost"]) - float(out.result.metrics["cost"])
    assert sum(parts.values()) == pytest.approx(saving, abs=1e-6)
    # The cost of keeping it is the fleet's on equal work, before the payment.
    m = out.result.metrics
    assert m["equal_work_cost"] == pytest.approx(m["cost"] + m["unfinished_charge"])


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lyapunov", "greedy", "offline"])
def test_every_policy_runs_under_an_event_and_the_site_holds_it(short, policy) -> None:
    """Lyapunov (its slot caps) and the hindsight plan's replay keep it with no new miss;
    a policy blind to events (greedy) is held by the site pausing its training jobs."""
    ev = GridEvent("guangzhou", 24.0, 3.0, limit_kw=62.0, notice_hours=2.0)
    out = run_spec(RunSpec(short.name, policy, baseline=False, caps=Caps(events=(ev,))),
                   short)
    row, = out.result.meta["grid_events"]
    if policy == "greedy":
        plan = out.result.plan
        during = plan[(plan["slot"] >= 96) & (plan["slot"] < 108)
                      & (plan["region"] == "guangzhou") & (plan["n_gpus"] > 0)]
        assert (during["kind"] == "inference").all()  # every training job there paused
    else:
        assert row["met"] and row["over_kwh"] == 0.0, row
        assert row["new_misses"] == []
        # A service may leave the event's site in its slots (it was held there and the
        # slot MILP had no feasible choice: the greedy fallback ran every event slot).
        assert not any("fallback" in w for w in out.result.warnings)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lookahead", "offline"])
def test_a_move_counts_its_transfer_where_the_meter_reads_it(short, policy) -> None:
    """A service moved back into the event's site (the look-ahead) and a training job moved
    away from it (the hindsight plan's replay) draw half their transfer there: the slot
    decision counts the half a move brings, the site pauses a job whose move away would
    break the limit, so the meter stays within it (it read 62.0076 and 63.69 kW)."""
    ev = GridEvent("guangzhou", 30.0, 3.0, limit_kw=62.0, notice_hours=2.0)
    out = run_spec(RunSpec(short.name, policy, baseline=False, caps=Caps(events=(ev,))),
                   short)
    row, = out.result.meta["grid_events"]
    assert row["met"] and row["max_import_kw"] <= 62.0 * (1 + 1e-6), row


def test_the_cli_takes_events_and_refuses_bad_ones_in_one_line(tmp_path, capsys) -> None:
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "plan", "--scenario", "seed3", "--grid-event",
                 "guangzhou,30,3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --grid-event") and "\n" not in err
    assert main(["--db", db, "plan", "--scenario", "seed3", "--grid-event",
                 "guangzhou,30,3,20"]) == 2
    assert "below the" in capsys.readouterr().err


@pytest.mark.slow
def test_the_cli_reports_the_event_in_json(tmp_path, capsys) -> None:
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "plan", "--scenario", "seed3", "--no-baseline",
                 "--no-strongest", "--json", "--grid-event",
                 "suzhou,2025-07-14T04:00,3,40,4"]) == 0
    obj = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ev, = obj["grid_events"]
    assert set(ev) >= {"met", "max_import_kw", "limit_kw", "shed_kwh", "extra_cost",
                       "payment"}
    assert ev["met"] and ev["limit_kw"] == 40.0 and ev["shed_kwh"] > 0
    assert obj["bill"]["event_payment"] == 0.0
    # The report is stored with the run: runs show prints the same.
    assert main(["--db", db, "runs", "show", obj["run_id"], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["grid_events"] == obj["grid_events"]
    assert main(["--db", db, "runs", "show", obj["run_id"]]) == 0
    assert "grid event suzhou@2025-07-14T04:00 (3 h, 4 h notice): kept" in (
        capsys.readouterr().out)


@pytest.mark.slow
def test_the_envelope_offers_what_the_plan_can_shed_and_an_offer_is_kept(short) -> None:
    spec = RunSpec(short.name, baseline=False)
    res, _ = simulate_spec(spec, short)
    env = Envelope(short, res.plan, res.slots, res.jobs, spec.sim.restart_s)
    table = offers(env, 3.0, 2.0)
    assert list(table.columns) == list(OFFER_COLUMNS)
    assert len(table) == 3 * (48 - 3 + 1)
    assert (table["sheddable_kw"] >= 0).all()
    assert (table["limit_kw"] <= table["planned_import_kw"] + 1e-9).all()
    floors = site_floors_kw(short)
    for r in table.itertuples():
        s = short.slot_of(r.start)
        assert r.limit_kw >= floors[r.datacenter][s:s + 12].max() - 1e-9
    best = table.loc[table["sheddable_kw"].idxmax()]
    assert best["sheddable_kw"] > 1.0
    curve = env.cost_curve(best["datacenter"], short.slot_of(best["start"]), 3.0)
    assert curve[0] == (0.0, 0.0)
    assert curve[-1][0] == pytest.approx(best["sheddable_kw"])
    ev = GridEvent(best["datacenter"], float(short.slot_of(best["start"])) / 4, 3.0,
                   limit_kw=float(best["limit_kw"]), notice_hours=2.0)
    out = run_spec(RunSpec(short.name, baseline=False, caps=Caps(events=(ev,))), short)
    row, = out.result.meta["grid_events"]
    assert row["new_misses"] == [] and row["met"], row


@pytest.mark.slow
def test_a_service_that_may_run_elsewhere_is_a_lever_where_the_plan_leaves_room(short) -> None:
    spec = RunSpec(short.name, baseline=False)
    res, _ = simulate_spec(spec, short)
    env = Envelope(short, res.plan, res.slots, res.jobs, spec.sim.restart_s)
    found = [(d, a) for d in env.names for a in range(0, short.n_slots - 12, 8)
             if env.movable(d, a, a + 12)]
    assert found
    d, a = found[0]
    for lever in env.movable(d, a, a + 12):
        _job, where = env.elsewhere[lever.job_id]
        assert d in where and len(where) > 1 and lever.kw.max() > 0
    # With no GPU free anywhere else in the plan, no service can leave.
    env.free = {k: np.zeros_like(v) for k, v in env.free.items()}
    assert env.movable(d, a, a + 12) == []


def test_flexibility_cli_prints_offers_as_json(tmp_path, capsys) -> None:
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "flexibility", "--datacenter", "mars"]) == 2
    assert "mars" in capsys.readouterr().err


def test_a_native_toml_time_starts_an_event_in_utc() -> None:
    from datetime import UTC, datetime

    from workbench.config import GridEventEntry

    entry = GridEventEntry.model_validate(
        {"datacenter": "a", "start": datetime(2025, 7, 14, 14), "hours": 3, "limit_kw": 5.0},
        strict=True)
    ev = GridEvent.from_dict(entry.model_dump(exclude_none=True))
    assert ev.start == datetime(2025, 7, 14, 14, tzinfo=UTC)


def test_two_events_of_one_name_are_refused_in_one_line(short) -> None:
    from workbench.errors import ScenarioError

    ev = GridEvent("guangzhou", 24.0, 3.0, limit_kw=62.0, name="peak")
    with pytest.raises(ScenarioError, match="share the name 'peak'"):
        replace(short.supply, grid_events=(ev, replace(ev, start=30.0)))


def test_no_slot_decision_sees_an_event_before_its_notice(short) -> None:
    from workbench.policies.migration import event_exits

    # Starts 6 minutes into slot 96, announced as it starts: known from slot 97 only.
    ev = GridEvent("guangzhou", 24.1, 3.0, limit_kw=62.0, notice_hours=0.0)
    assert ev.slots(short) == (96, 109) and ev.known_from(short) == 97
    caps = Caps(events=(ev,))
    from workbench.meter import job_power_limits_kw

    assert np.isinf(job_power_limits_kw(short, caps, 96, 97, known_at=96)).all()
    assert np.isfinite(job_power_limits_kw(short, caps, 97, 98, known_at=97)).any()

    class _State:
        t = 96
        jobs: tuple = ()

    class _Opts:
        job_index = np.array([0])
        moves = np.array([True])

        def __len__(self) -> int:
            return 1

    state = _State()
    state.jobs = (type("J", (), {"job": type("K", (), {"is_training": False})(),
                                 "last_datacenter": "guangzhou"})(),)
    assert not event_exits(short, state, _Opts(), (ev,)).any()
    state.t = 97
    assert event_exits(short, state, _Opts(), (ev,)).all()


@pytest.mark.slow
def test_a_scenario_cut_event_holds_its_run_and_leaves_the_comparisons_running(short) -> None:
    ev = GridEvent("guangzhou", 24.0, 3.0, cut_pct=5.0, notice_hours=2.0)
    sc = replace(short, supply=replace(short.supply, grid_events=(ev,)))
    out = run_spec(RunSpec(sc.name, baseline=True), sc)
    row, = out.result.meta["grid_events"]
    assert row["met"] and row["limit_kw"] == pytest.approx(row["planned_import_kw"] * 0.95)
    assert out.baseline is not None and "grid_events" not in out.baseline.meta


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lookahead", "offline"])
def test_a_battery_is_a_lever_the_planners_use_to_keep_an_event(with_battery, policy) -> None:
    """A battery at the event's site lets the jobs draw beyond the limit less the idle load:
    the plan discharges it in the event's slots, the import stays at the limit, and no
    deadline the run without the event meets is missed."""
    sc = with_battery
    ev = GridEvent("guangzhou", 24.0, 3.0, limit_kw=58.0, notice_hours=2.0)
    out = run_spec(RunSpec(sc.name, policy=policy, baseline=False, caps=Caps(events=(ev,))),
                   sc)
    row, = out.result.meta["grid_events"]
    assert row["met"] and row["new_misses"] == [] and row["max_import_kw"] <= 58.0 * (1 + 1e-6)
    slots = out.result.slots
    a, b = ev.slots(sc)
    load = slots[site_key("load_kw", "guangzhou")].to_numpy()[a:b]
    dis = slots[site_key("discharge_kwh", "guangzhou")].to_numpy()[a:b]
    # The battery served the site in the event: its load went above the limit.
    assert dis.sum() > 1.0 and load.max() > 58.0 + 1.0
    assert not out.result.metrics.get("power_trims")


def test_a_battery_lowers_the_limit_an_event_may_ask_by_what_it_can_give(with_battery) -> None:
    from workbench.sim.results import check_scenario_events

    # 57.19 kW drawn whatever runs; the battery gives min(40, 180 kWh * eta / 3 h) = 40 kW.
    ok, = check_scenario_events(with_battery, [GridEvent("guangzhou", 10.0, 3.0,
                                                         limit_kw=20.0)])
    assert ok.limit_kw == 20.0
    with pytest.raises(ValueError, match=r"less the 40\.00 kW its battery can give for 3 h"):
        check_scenario_events(with_battery, [GridEvent("guangzhou", 10.0, 3.0, limit_kw=10.0)])
    # A longer event: the energy, not the power, bounds it (180 * 0.9487 / 10 h = 17.08 kW).
    with pytest.raises(ValueError, match=r"give at least 40\.1\d kW"):
        check_scenario_events(with_battery, [GridEvent("guangzhou", 10.0, 10.0, limit_kw=30.0)])
    # A policy that leaves the battery to the site's greedy dispatch cannot count on it.
    with pytest.raises(ValueError, match="lyapunov does not plan the batteries"):
        check_scenario_events(with_battery, [GridEvent("guangzhou", 10.0, 3.0, limit_kw=20.0)],
                              "lyapunov")
    spec = RunSpec(with_battery.name, policy="greedy", baseline=False,
                   caps=Caps(events=(GridEvent("guangzhou", 10.0, 3.0, limit_kw=20.0),)))
    with pytest.raises(SpecError, match="greedy does not plan the batteries"):
        run_spec(spec, with_battery)


def test_the_battery_counts_only_what_it_can_hold_by_the_event(short) -> None:
    """A battery near its floor at the start gives an event an hour later only what an
    hour's charge delivers: 40 kW x 0.9487 x 1 h = 37.95 kWh, x 0.9487 over 3 h = 12.00 kW."""
    from workbench.sim.results import check_scenario_events

    low = Battery("gz-bat", "guangzhou", energy_kwh=200.0, power_kw=40.0, soc_initial=0.1)
    sc = replace(short, supply=replace(short.supply, batteries=(low,)))
    with pytest.raises(ValueError, match=r"less the 12\.00 kW its battery can give for 3 h "
                                         r"from what it can hold by then\); give at least "
                                         r"45\.19 kW"):
        check_scenario_events(sc, [GridEvent("guangzhou", 1.0, 3.0, limit_kw=20.0)])
    check_scenario_events(sc, [GridEvent("guangzhou", 1.0, 3.0, limit_kw=45.2)])


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lookahead", "offline"])
def test_an_event_below_the_idle_load_is_planned_on_the_battery(short, policy) -> None:
    """A limit 10 kW below guangzhou's 56 kW idle load: the plans charge the battery
    before the event and serve the idle load beyond the limit from it (the block LP's
    ``D[s,b]``), with no slot falling back and no deadline missed."""
    low = Battery("gz-bat", "guangzhou", energy_kwh=200.0, power_kw=40.0, soc_initial=0.1)
    sc = replace(short, supply=replace(short.supply, batteries=(low,)))
    ev = GridEvent("guangzhou", 1.0, 3.0, limit_kw=46.0, notice_hours=1.0)
    out = run_spec(RunSpec(sc.name, policy=policy, baseline=False, caps=Caps(events=(ev,))),
                   sc)
    row, = out.result.meta["grid_events"]
    assert row["met"] and row["new_misses"] == [] and row["max_import_kw"] <= 46.0 + 1e-6
    assert not [w for w in out.result.warnings if "fallback" in w]
    a, b = ev.slots(sc)
    assert out.result.slots[site_key("charge_kwh", "guangzhou")].to_numpy()[:a].sum() > 30.0


@pytest.mark.slow
def test_the_envelope_counts_the_battery_and_its_offers_are_kept(with_battery) -> None:
    sc = with_battery
    spec = RunSpec(sc.name, baseline=False)
    res, _ = simulate_spec(spec, sc)
    env = Envelope(sc, res.plan, res.slots, res.jobs, spec.sim.restart_s)
    gz = offers(env, 3.0, 2.0, datacenters=["guangzhou"])
    assert (gz["battery_kw"] > 1.0).mean() > 0.5 and (gz["battery_kw"] <= 40.0 + 1e-9).all()
    for i in (3, 27):  # the evening and the night after, each with a full battery's power
        r = gz.iloc[i]
        ev = GridEvent("guangzhou", float(sc.slot_of(r["start"])) / 4, 3.0,
                       limit_kw=float(r["limit_kw"]), notice_hours=2.0)
        out = run_spec(RunSpec(sc.name, baseline=False, caps=Caps(events=(ev,))), sc)
        row, = out.result.meta["grid_events"]
        assert row["met"] and row["new_misses"] == [], (r.to_dict(), row)


@pytest.mark.slow
def test_a_comparison_neither_holds_nor_claims_the_runs_event_and_pairs_with_its_baseline(
        short) -> None:
    from workbench.runs import same_settings

    ev = GridEvent("guangzhou", 24.0, 3.0, limit_kw=60.0, notice_hours=2.0)
    spec = RunSpec(short.name, caps=Caps(power_kw=500.0, events=(ev,)))
    assert spec.comparison("asap-home").metered == Caps(power_kw=500.0)
    out = run_spec(spec, short)
    assert out.baseline is not None
    held = Caps.from_stored(out.result.meta["knobs"])
    base = Caps.from_stored(out.baseline.meta["knobs"])
    assert held.events and not base.events and base.power_kw == 500.0
    plain, _ = simulate_spec(RunSpec(short.name, policy="asap-home", baseline=False,
                                     metered=Caps(power_kw=500.0)), short)
    assert plain.metrics["cost"] == out.baseline.metrics["cost"]
    # A stored asap-home run under the same power cap is the event run's reference.
    info = {"forecast_mode": "perfect", "knobs": json.dumps(out.result.meta["knobs"])}
    for ref in (out.baseline, plain):
        assert same_settings(info, {"forecast_mode": "perfect",
                                    "knobs": json.dumps(ref.meta["knobs"])})


def test_a_source_sites_cap_limits_a_move_out_of_it_by_its_sending_half() -> None:
    """Issue 33: a move's sending half is metered at the site the data leave (the meter's
    split, ``transfer_charges``' ``source_kwh``), so the slot decision counts it in that
    site's power row: job ``m`` moves its 200 GB checkpoint from ``a`` to ``b`` (2 kWh of
    transfer, 1 kWh at each end, 4 kW over the slot), job ``k`` runs at ``a`` under a cap
    that holds ``k`` but not ``k`` and the sending half; counting only the destination's
    half, the decision ran both and ``a`` drew over its cap."""
    from helpers_sim import tiny_scenario, training

    from workbench.meter import idle_kw, job_power_limits_kw
    from workbench.optim.fastslot import solve_slot_problem_fast
    from workbench.outcome import transfer_charges
    from workbench.policies.base import JobState, SlotState, slot_options
    from workbench.policies.problems import build_slot_problem

    mover = replace(training("m", counts=(1,)), checkpoint_gb=200.0)
    stayer = training("k", counts=(1,))
    sc = tiny_scenario([mover, stayer])
    state = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=(  # type: ignore[arg-type]
        JobState(job=mover, remaining=1.0, placement=None, last_datacenter="a", phi=200.0),
        JobState(job=stayer, remaining=1.0, placement=None, last_datacenter=None, phi=200.0)))
    opts = slot_options(state, {"ra": 1.0, "rb": 0.5}, {"ra": 600.0, "rb": 300.0})
    at_b = opts.datacenter == "b"
    # m is worth running only at b, k only at a.
    coef = np.where(at_b == (opts.job_index == 0), 1.0, -1.0)
    k_at_a = int(np.flatnonzero((opts.job_index == 1) & ~at_b)[0])
    m_at_b = int(np.flatnonzero((opts.job_index == 0) & at_b)[0])
    half_kwh = dict(transfer_charges(mover, "b", checkpoint_at="a", data_at=(), pending_s=0.0,
                                     link=sc.link).source_kwh)["a"]
    assert half_kwh == pytest.approx(200.0 * 0.01 / 2.0)
    send_kw = half_kwh / (sc.slot_s / 3600.0)
    cap_a = float(idle_kw(sc)[0]) + float(opts.power_kw[k_at_a]) + send_kw / 2.0
    caps = Caps(power_kw_by_dc={"a": cap_a})
    prob = build_slot_problem(state, opts, coef, caps)
    assert prob.dc_labels[prob.src_dc_index[m_at_b, 0]] == "a"
    assert prob.src_power_kw[m_at_b, 0] == pytest.approx(send_kw)
    assert (prob.src_dc_index[~at_b] == -1).all()  # staying at a (or starting) sends nothing
    limit_a = float(job_power_limits_kw(sc, caps, 0, 1, known_at=0)[0, 0])
    blind = replace(prob, src_dc_index=np.zeros((prob.n_options, 0), dtype=np.int64),
                    src_power_kw=np.zeros((prob.n_options, 0)))
    before, _ = solve_slot_problem_fast(blind, mip_rel_gap=0.0)
    after, _ = solve_slot_problem_fast(prob, mip_rel_gap=0.0)
    assert before is not None and after is not None
    assert before[k_at_a] and before[m_at_b]  # both: a draws k and the sending half
    drawn_before = prob.power_cap_kw[0] - prob.residual(before)["power_cap"][0]
    assert drawn_before > limit_a + send_kw / 4.0
    assert not prob.is_feasible(before) and prob.is_feasible(after)
    assert int(after.sum()) == 1
    assert prob.residual(after)["power_cap"][0] >= -1e-9
