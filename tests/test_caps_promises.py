"""Caps that keep their promises (issue 22): a carbon budget that can be kept is kept and one
that cannot is told before and after the run and met as closely as the deadlines allow; a
capped plan never emits more than uncapped; a power cap is a hard limit, and one below what
the inference services alone draw is refused before the run with the numbers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import xarray as xr
from helpers_sim import inference, tiny_scenario, training

from workbench.caps import Caps, kg_text
from workbench.cli import main
from workbench.model import Scenario
from workbench.policies.offline import LeastCarbon
from workbench.runner import CarbonFloor, RunSpec, SpecError, floor_note, run_spec, simulate_spec
from workbench.schema import site_key
from workbench.store import Store

POLICIES = ("lookahead", "offline", "lyapunov", "threshold")


def _scenario() -> Scenario:
    # a cheap and dirty, b dear and clean: carbon is bought with money.
    jobs = [training("t1", "a", slots_of_work=2.0, deadline_slot=8),
            training("t2", "a", arrival_slot=1, slots_of_work=2.0, deadline_slot=8),
            inference("svc", "a", first=0, last=8)]
    return tiny_scenario(jobs, n_slots=8, price_a=[0.3], price_b=[1.0], carbon_a=[800.0],
                         carbon_b=[100.0])


def _carbon(sc: Scenario, policy: str) -> dict:
    res, _ = simulate_spec(RunSpec(sc.name, policy, baseline=False), sc)
    return res.metrics


@pytest.fixture(scope="module")
def uncapped() -> dict[str, dict]:
    sc = _scenario()
    return {p: _carbon(sc, p) for p in POLICIES}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_budget_that_can_be_kept_is_kept_and_never_backfires(policy: str, uncapped) -> None:
    sc = _scenario()
    free = uncapped[policy]
    least = run_spec(RunSpec(sc.name, policy, caps=Caps(carbon_kg=1e6), baseline=False),
                     sc).least_carbon
    assert least is not None and least.carbon_kg < free["carbon_kg"]
    cap = 0.5 * (least.carbon_kg + free["carbon_kg"])  # between the least and the uncapped
    notes: list[str] = []
    outcome = run_spec(RunSpec(sc.name, policy, caps=Caps(carbon_kg=cap), baseline=False), sc,
                       notify=notes.append)
    m = outcome.result.metrics
    assert notes == []  # the bound says it can be kept: nothing to tell before the run
    assert m["carbon_kg"] <= free["carbon_kg"] + 1e-9
    assert m["deadline_misses"] == 0
    if policy == "offline":
        # The hindsight plan's bound keeps the cap; its replay pays the restarts and
        # transfers its LP neglects (a known gap, docs/results.md), never above uncapped.
        assert outcome.result.meta["bound"]["carbon_kg"] <= cap * (1 + 1e-6)
    else:
        assert m["carbon_cap_met"] is True, (m["carbon_kg"], cap)
    assert outcome.least_carbon_kg == pytest.approx(least.carbon_kg)


def test_a_budget_that_never_binds_leaves_the_lookahead_plan_as_uncapped() -> None:
    """A window whose uncapped plan keeps its share of the budget plans as if uncapped (no
    carbon rows, no budget needs), so a budget that never binds changes no decision."""
    sc = _scenario()
    free, _ = simulate_spec(RunSpec(sc.name, "lookahead", baseline=False), sc)
    loose, _ = simulate_spec(RunSpec(sc.name, "lookahead", baseline=False, caps=Caps(
        carbon_kg=100.0 * free.metrics["carbon_kg"])), sc)
    cols = ["slot", "job_id", "region", "n_gpus", "batch_size", "action"]
    assert loose.plan[cols].equals(free.plan[cols])
    assert (loose.metrics["cost"], loose.metrics["carbon_kg"]) == (
        free.metrics["cost"], free.metrics["carbon_kg"])


@pytest.mark.parametrize("policy", POLICIES)
def test_a_budget_below_the_least_carbon_is_told_and_met_as_closely_as_deadlines_allow(
        policy: str, uncapped) -> None:
    sc = _scenario()
    free = uncapped[policy]
    probe = run_spec(RunSpec(sc.name, policy, caps=Caps(carbon_kg=1e6), baseline=False), sc)
    assert probe.least_carbon is not None
    least = probe.least_carbon.carbon_kg
    cap = 0.5 * least
    notes: list[str] = []
    outcome = run_spec(RunSpec(sc.name, policy, caps=Caps(carbon_kg=cap), baseline=False), sc,
                       notify=notes.append)
    m, warnings = outcome.result.metrics, outcome.result.warnings
    assert len(notes) == 1 and "cannot be met with every deadline met" in notes[0]
    # Told before the run from what is known then (the jobs arrived, the forecast), not
    # from hindsight; the hindsight least carbon is the yardstick beside the verdict.
    assert "jobs known at the start" in notes[0] and "hindsight" not in notes[0]
    assert any(f"{kg_text(least)} kg" in w and "in hindsight" in w for w in warnings)
    assert warnings[0] == notes[0]
    # The miss is one warning, with the least carbon beside it.
    missed = [w for w in warnings if "carbon cap missed" in w or "MISSED" in w]
    assert len(missed) == 1 and f"({kg_text(least)} kg)" in missed[0], missed
    # It does not give up: every deadline met, no more carbon than uncapped.
    assert m["deadline_misses"] == 0 and m["jobs_unfinished"] == 0
    assert m["carbon_kg"] <= free["carbon_kg"] + 1e-9
    assert m["carbon_kg"] >= least * (1 - 1e-6)  # the bound is a bound
    assert m["carbon_cap_met"] is False


@pytest.mark.slow
def test_plan_json_carries_the_least_carbon_beside_the_cap(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_scenario())
    argv = ["--db", str(db), "plan", "--scenario", "tiny", "--json", "--no-progress"]
    assert main([*argv, "--carbon-cap", "1e6"]) == 0
    loose = json.loads(capsys.readouterr().out)
    least = loose["least_carbon_kg"]
    assert loose["carbon_cap_met"] is True and 0 < least <= loose["carbon_kg"] + 1e-9
    assert main([*argv, "--carbon-cap", f"{least / 2}"]) == 0
    out = capsys.readouterr()
    tight = json.loads(out.out)
    assert tight["carbon_cap_kg"] == pytest.approx(least / 2)
    assert tight["least_carbon_kg"] == pytest.approx(least)
    assert tight["carbon_cap_met"] is False and tight["carbon_kg"] >= least * (1 - 1e-6)
    assert "cannot be met with every deadline met" in out.err
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["carbon_cap_kg"] is None


@pytest.mark.parametrize("policy", ["lookahead", "offline", "lyapunov", "threshold"])
def test_a_power_cap_that_binds_is_never_exceeded(policy: str) -> None:
    sc = _scenario()
    free, _ = simulate_spec(RunSpec(sc.name, policy, baseline=False), sc)
    peak = {d: float(free.slots[site_key("grid_import_kw", d)].max()) for d in ("a", "b")}
    busiest = max(peak, key=peak.__getitem__)
    cap = 0.6 * peak[busiest]
    res, _ = simulate_spec(RunSpec(sc.name, policy, caps=Caps(power_kw=cap),
                                   baseline=False), sc)
    meter = res.slots[[site_key("grid_import_kw", d) for d in ("a", "b")]].to_numpy()
    assert meter.max() <= cap * (1 + 1e-6)
    assert res.metrics["power_cap_violations"] == 0
    assert res.metrics["power_cap_kw"] == cap


def test_a_power_cap_below_what_inference_alone_draws_is_refused_with_the_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sc = _scenario()
    spec = RunSpec(sc.name, "lookahead", caps=Caps(power_kw_by_dc={"a": 0.01, "b": 0.01}))
    with pytest.raises(SpecError, match=r"power cap below what inference alone draws: "
                                        r"service svc draws at least \d+\.\d+ kW"):
        run_spec(spec, sc)
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(sc)
    assert main(["--db", str(db), "plan", "--scenario", "tiny", "--power-cap-kw", "0.01",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: power cap below what inference "
                                                   "alone draws")
    with Store(db, read_only=True) as store:
        assert len(store.runs()) == 0  # refused before any run, the baseline's too


@pytest.mark.parametrize("caps", [Caps(carbon_kg_by_dc={"nowhere": 1.0}),
                                  Caps(power_kw_by_dc={"nowhere": 1.0})])
@pytest.mark.parametrize("policy", POLICIES)
def test_no_policy_plans_past_a_cap_naming_an_unknown_datacenter(caps: Caps, policy: str
                                                                 ) -> None:
    from workbench.policies import make_policy

    sc = _scenario()
    with pytest.raises(ValueError, match="unknown datacenter.*nowhere"):
        make_policy(policy, truth=sc, caps=caps).reset(sc.view())
    with pytest.raises(SpecError, match="unknown datacenter.*nowhere"):
        run_spec(RunSpec(sc.name, policy, caps=caps), sc)


@pytest.mark.slow
def test_a_budget_that_cannot_be_kept_makes_the_lookahead_minimise_carbon() -> None:
    """Below the least carbon achievable the runner asks the look-ahead for carbon first
    (``carbon_first``): each binding window buys its least carbon at any price, where a
    keepable budget is paced at the window's average price of a kg cut. seed3's first day:
    less carbon than the same run paced at the average price, every deadline met."""
    from workbench import build_seed3, first_hours

    sc = first_hours(build_seed3(), 24, arrivals_h=6, name="mini-cap")
    probe = run_spec(RunSpec(sc.name, "lookahead", caps=Caps(carbon_kg=1e6), baseline=False),
                     sc)
    assert probe.least_carbon is not None
    cap = Caps(carbon_kg=0.9 * probe.least_carbon.carbon_kg)
    first = run_spec(RunSpec(sc.name, "lookahead", caps=cap, baseline=False), sc).result
    paced = run_spec(RunSpec(sc.name, "lookahead", caps=cap, baseline=False,
                             knobs={"carbon_first": False}), sc).result
    assert first.meta["knobs"]["carbon_first"] is True
    assert paced.meta["knobs"]["carbon_first"] is False
    assert first.metrics["deadline_misses"] == paced.metrics["deadline_misses"] == 0
    assert first.metrics["carbon_kg"] < paced.metrics["carbon_kg"] - 1.0
    assert first.metrics["carbon_kg"] <= probe.result.metrics["carbon_kg"]


def test_the_planners_floor_is_told_before_the_run_from_what_is_known_at_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The look-ahead's floor (its least carbon at any price, :func:`runner.floor_run`) is
    computed before the run on what is known then (the forecast made at the start, the jobs
    arrived by then: not t2), so it lies below the same floor on the truth; a cap between
    the bound and the floor known then is told before the run as out of this planner's
    reach, ahead of the run's verdict."""
    from workbench import runner

    sc = _scenario()
    given: list[Scenario] = []
    real = runner.floor_run

    def spy(spec: RunSpec, scenario: Scenario, caps: Caps, **kw: object) -> object:
        given.append(scenario)
        return real(spec, scenario, caps, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "floor_run", spy)
    spec = RunSpec(sc.name, "lookahead", caps=Caps(carbon_kg=1e6), baseline=False)
    told = runner.known_at_start(spec, sc, None)
    probe = run_spec(spec, sc)
    assert [[j.job_id for j in s.jobs] for s in given] == [["t1", "svc"]]
    xr.testing.assert_identical(given[0].grid, told.grid)
    floor = probe.carbon_floor
    assert floor is not None and (floor.jobs, floor.jobs_later) == (2, 1)
    assert floor.carbon_kg < real(spec, sc, Caps()).metrics["carbon_kg"]  # not hindsight
    stored = probe.result.meta["carbon_floor"]
    assert stored["carbon_kg"] == floor.carbon_kg and "should be met" in stored["note"]
    bound = runner.least_carbon(spec, told, spec.caps)
    assert bound is not None and bound.carbon_kg < floor.carbon_kg
    cap = 0.5 * (bound.carbon_kg + floor.carbon_kg)
    notes: list[str] = []
    out = run_spec(replace(spec, caps=Caps(carbon_kg=cap)), sc, notify=notes.append)
    assert len(notes) == 1 and "below what this planner reaches" in notes[0]
    assert f"carbon floor {kg_text(floor.carbon_kg)} kg" in notes[0]
    assert out.carbon_floor_kg == pytest.approx(floor.carbon_kg)
    warnings = out.result.warnings
    verdict = [i for i, w in enumerate(warnings) if "carbon cap missed" in w or "MISSED" in w]
    assert warnings[0] == notes[0] and verdict and verdict[0] > 0


@pytest.mark.parametrize(("cap", "says"), [
    (90.0, "the cap 90.0 kg is below the least-carbon bound 100.0 kg: it cannot be met"),
    (110.0, "the cap 110.0 kg is 10.0 kg below what this planner reaches and above the "
            "least-carbon bound 100.0 kg: the 20.0 kg between floor and bound"),
    (125.0, "the cap 125.0 kg is above it: it should be met unless the 3 job(s) arriving "
            "later need more than its 5 kg of headroom"),
])
def test_the_floor_verdict_places_the_cap_between_bound_and_floor(cap: float, says: str
                                                                  ) -> None:
    floor = CarbonFloor(carbon_kg=120.0, cost=5.0, jobs=2, jobs_later=3, deadline_misses=0,
                        cpu_s=0.1)
    least = LeastCarbon(carbon_kg=100.0, cost=4.0, shortfall={})
    note = floor_note(cap, floor, least)
    assert note.startswith("carbon floor 120.0 kg (the planner's least carbon at any price, "
                           "on the forecast made at the start, for the jobs known then: 2 "
                           "job(s), 3 arriving later not in it)")
    assert says in note
