"""The simulator: clock, arrivals, truth, losses, validation, outcomes, recorders."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
from helpers_sim import SLOT_S, inference, tiny_scenario, training
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import perf
from workbench.caps import Caps
from workbench.forecast import Forecast, default_forecast_mode
from workbench.io.plan_csv import PLAN_COLUMNS, read_plan_csv, write_plan_csv
from workbench.model import Scenario
from workbench.optim.info import SolveInfo
from workbench.policies.base import Allocation, Placement, SlotState
from workbench.policies.baselines import (
    AsapHome,
    CarbonScaling,
    CheapestAtArrival,
    GoodputOnly,
    WaitForCheap,
)
from workbench.recorders import CsvRecorder, MemoryRecorder
from workbench.schema import site_key
from workbench.sim import AllocationError, simulate


@dataclass
class Scripted:
    """A policy that plays a fixed script: slot -> {job: placement}."""

    script: dict[int, dict[str, Placement]] = field(default_factory=dict)
    solve: SolveInfo | None = None
    name: str = "scripted"
    seen: list[SlotState] = field(default_factory=list)

    def reset(self, scenario: Scenario) -> None:
        self.seen = []

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        self.seen.append(state)
        return Allocation(placements=self.script.get(state.t, {}), solve=self.solve,
                          queues={"Z:a": float(state.t), "Z:b": 1.0})


def on(dc: str, n: int = 1, m: int = 128) -> Placement:
    return Placement(dc, "A100", n, m)


def power_w(n: int = 1, m: int = 128) -> float:
    from helpers_sim import profile

    prof = profile()
    return float(perf.power_w(prof, n, m))


def test_clock_arrivals_and_one_row_per_active_slot() -> None:
    sc = tiny_scenario([training("late", arrival_slot=2, slots_of_work=50.0),
                        inference("svc", first=1, last=3)], n_slots=5)
    pol = Scripted()
    res = simulate(sc, pol, forecast_mode=default_forecast_mode(sc))
    assert [len(s.jobs) for s in pol.seen] == [0, 1, 2, 1, 1]
    assert [s.time for s in pol.seen] == sc.slot_starts()
    late = res.plan[res.plan["job_id"] == "late"]
    assert late["slot"].tolist() == [2, 3, 4]
    assert (late["action"] == "pause").all()
    assert (late["slot_end"] - late["slot_start"]).eq(pd.Timedelta(seconds=SLOT_S)).all()
    assert res.plan["slot_start"].dt.tz is not None
    assert res.plan.columns[: len(PLAN_COLUMNS)].tolist() == list(PLAN_COLUMNS)
    assert res.slots["slot"].tolist() == list(range(5))


def test_progress_energy_and_mid_slot_finish_match_hand_figures() -> None:
    # 1.5 slots of work at batch m0 (efficiency exactly 1) with no restart loss.
    sc = tiny_scenario([training("j", slots_of_work=1.5)], n_slots=4)
    res = simulate(sc, AsapHome(restart_s=0),
                   forecast_mode=default_forecast_mode(sc), restart_s=0.0)
    rows = res.plan[res.plan["job_id"] == "j"].reset_index(drop=True)
    assert rows["action"].tolist() == ["start", "finish"]
    assert rows["progress"].tolist() == pytest.approx([2 / 3, 1 / 3])
    assert rows.loc[1, "used_s"] == pytest.approx(SLOT_S / 2)
    e_full = power_w() * SLOT_S / 3.6e6 * 1.5  # PUE of a
    assert rows["energy_kwh"].tolist() == pytest.approx([e_full, e_full / 2])
    assert rows["cost"].tolist() == pytest.approx([e_full * 1.0, e_full / 2 * 1.0])
    assert rows["carbon_kg"].tolist() == pytest.approx([e_full * 0.6, e_full / 2 * 0.6])
    out = res.jobs.set_index("job_id").loc["j"]
    assert bool(out["finished"])
    assert out["jct_h"] == pytest.approx(1.5 * SLOT_S / 3600)
    assert out["finish_time"] == sc.start + pd.Timedelta(seconds=1.5 * SLOT_S)
    assert len(res.plan[res.plan["job_id"] == "j"]) == 2  # no rows after it finished


def test_restart_is_lost_on_start_and_resume_not_while_running() -> None:
    sc = tiny_scenario([training("j", slots_of_work=10.0)], n_slots=4)
    pol = Scripted({0: {"j": on("a")}, 1: {"j": on("a")}, 3: {"j": on("a")}})
    res = simulate(sc, pol, forecast_mode=default_forecast_mode(sc), restart_s=90.0)
    rows = res.plan[res.plan["job_id"] == "j"]
    assert rows["action"].tolist() == ["start", "run", "pause", "resume"]
    full = 1 / 10
    assert rows["progress"].tolist() == pytest.approx(
        [full * 810 / 900, full, 0.0, full * 810 / 900])
    assert rows["lost_s"].tolist() == [90.0, 0.0, 0.0, 90.0]
    # Paused rows sit at the checkpoint's datacenter with no GPUs.
    pause = rows[rows["action"] == "pause"].iloc[0]
    assert (pause["region"], pause["gpu_type"], pause["n_gpus"], pause["energy_kwh"]) == (
        "a", "", 0, 0.0)


def test_the_policy_predicts_a_resize_at_the_runs_resize_seconds() -> None:
    """``--resize-s`` reaches the policy: the state it sees carries the run's resize seconds,
    and the options it predicts from that state lose them on a change of GPU count."""
    from workbench.policies.base import slot_options

    sc = tiny_scenario([training("j", slots_of_work=10.0, counts=(1, 2))], n_slots=2)
    pol = Scripted({0: {"j": on("a", 1)}, 1: {"j": on("a", 2)}})
    res = simulate(sc, pol, forecast_mode=default_forecast_mode(sc), resize_s=300.0)
    rows = res.plan[res.plan["job_id"] == "j"]
    assert rows["lost_s"].tolist()[1] == 300.0  # what the simulator charges
    state = pol.seen[1]
    assert state.resize_s == 300.0
    regions = [dc.region for dc in sc.datacenters]
    opts = slot_options(state, dict.fromkeys(regions, 0.1), dict.fromkeys(regions, 400.0))
    lost = {(str(d), int(n)): float(s) for d, n, s in zip(
        opts.datacenter, opts.n_gpus, opts.lost_s, strict=True) if d == "a"}
    assert lost[("a", 1)] == 0.0 and lost[("a", 2)] == 300.0


def test_migration_loses_transfer_and_restart_and_is_recorded() -> None:
    sc = tiny_scenario([training("j", slots_of_work=10.0)], n_slots=2)
    pol = Scripted({0: {"j": on("a")}, 1: {"j": on("b")}})
    res = simulate(sc, pol, forecast_mode=default_forecast_mode(sc), restart_s=100.0)
    rows = res.plan[res.plan["job_id"] == "j"].reset_index(drop=True)
    assert rows["action"].tolist() == ["start", "migrate"]
    transfer = 8 * 2.0 / 10.0  # 2 GB over 10 Gbit/s
    assert rows.loc[1, "lost_s"] == pytest.approx(100.0 + transfer)
    e = power_w() * SLOT_S / 3.6e6 * 1.2 + 2.0 * 0.01
    assert rows.loc[1, "energy_kwh"] == pytest.approx(e)
    mig = res.migrations
    assert len(mig) == 1
    assert mig.iloc[0][["job_id", "from_region", "to_region"]].tolist() == ["j", "a", "b"]
    assert mig.iloc[0]["transfer_s"] == pytest.approx(transfer)
    assert res.metrics["migrations"] == 1
    assert res.metrics["migration_gb"] == pytest.approx(2.0)
    assert res.metrics["energy_moved_kwh"] == pytest.approx(e)


@pytest.mark.parametrize(
    ("script", "match"),
    [
        ({"j": on("a", 3), "k": on("a", 2)}, "has 4"),
        ({"j": Placement("a", "H100", 1, 128)}, "not a GPU pool"),
        ({"ghost": on("a")}, "not active"),
        ({"j": on("a", 0)}, "n_gpus >= 1"),
    ],
)
def test_invalid_allocations_raise_clear_errors(script: dict, match: str) -> None:
    sc = tiny_scenario([training("j"), training("k")], n_slots=2)
    with pytest.raises(AllocationError, match=match):
        simulate(sc, Scripted({0: script}), forecast_mode=default_forecast_mode(sc))


def test_inference_outside_latency_bound_is_rejected() -> None:
    sc = tiny_scenario([inference("svc", max_latency_ms=5.0)], n_slots=2)
    with pytest.raises(AllocationError, match="ms from its home"):
        simulate(sc, Scripted({0: {"svc": on("b")}}), forecast_mode=default_forecast_mode(sc))


def test_unfinished_jobs_have_reasons() -> None:
    jobs = [
        training("slow", slots_of_work=20.0, deadline_slot=3),
        training("idle", slots_of_work=1.0),
        training("huge", gpus=8, counts=(8,)),
        training("open", slots_of_work=20.0),
    ]
    sc = tiny_scenario(jobs, n_slots=4)
    res = simulate(sc, Scripted({t: {"slow": on("a"), "open": on("b")} for t in range(4)}),
                   forecast_mode=default_forecast_mode(sc))
    why = res.jobs.set_index("job_id")["reason"]
    assert why["slow"].startswith("deadline passed with ")
    assert why["idle"] == "never scheduled: scripted kept it waiting for 4 slots"
    assert why["huge"].startswith("never scheduled: no capacity")
    assert "no deadline" in why["open"]
    assert not res.jobs["finished"].any()
    assert res.metrics["deadline_misses"] == 1
    assert any("unfinished" in w for w in res.warnings)


def test_fallback_and_unserved_inference_reach_warnings_and_metrics() -> None:
    sc = tiny_scenario([inference("svc", last=2)], n_slots=2)
    pol = Scripted({0: {"svc": on("a")}},
                   solve=SolveInfo("time_limit", 0.5, fallback=True, message="greedy"))
    res = simulate(sc, pol, forecast_mode=default_forecast_mode(sc))
    assert res.metrics["fallbacks"] == 2
    assert res.metrics["solve_s_max"] == pytest.approx(0.5)
    assert res.metrics["inference_unserved_slots"] == 1
    assert sum("fallback" in w for w in res.warnings) == 2
    assert any("unserved in 1 of 2 slots" in w for w in res.warnings)
    assert res.meta["status"] == "fallback"
    assert res.metrics["queue_mean:Z"] == pytest.approx(1.5)  # (0+1) + (1+1) over 2 slots


def test_noise_is_seeded_and_zero_noise_is_exact() -> None:
    jobs = [training("j", slots_of_work=3.0), training("k", home="b", slots_of_work=3.0)]
    sc = tiny_scenario(jobs, n_slots=6)
    a = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc), noise=0.3, seed=1)
    b = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc), noise=0.3, seed=1)
    c = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc), noise=0.3, seed=2)
    pd.testing.assert_frame_equal(a.plan, b.plan)
    assert not a.plan["progress"].equals(c.plan["progress"])
    exact = simulate(sc, AsapHome(restart_s=0),
                     forecast_mode=default_forecast_mode(sc), restart_s=0.0)
    assert exact.plan.loc[exact.plan["job_id"] == "j", "progress"].iloc[0] == pytest.approx(1 / 3)


def test_online_estimates_track_a_hidden_speed_factor() -> None:
    sc = tiny_scenario([training("j", slots_of_work=30.0)], n_slots=12)
    pol = Scripted({t: {"j": on("a")} for t in range(12)})
    res = simulate(sc, pol,
                   forecast_mode=default_forecast_mode(sc), noise=0.4, seed=3, ema_alpha=0.5)
    rows = res.plan[(res.plan["job_id"] == "j") & (res.plan["action"] == "run")]
    true_speed = rows["progress"].to_numpy() * 30.0  # vs 1.0 predicted at m0
    est = pol.seen[-1].jobs[0].throughput_scale
    assert est == pytest.approx(float(np.exp(np.mean(np.log(true_speed[-4:])))), rel=0.5)
    assert est != 1.0


def test_recorders_see_every_slot_and_csv_matches_the_result(tmp_path) -> None:
    jobs = [training("j", slots_of_work=1.2), training("k", home="b", arrival_slot=1),
            inference("svc", last=3)]
    sc = tiny_scenario(jobs, n_slots=4)
    mem = MemoryRecorder()
    csv = CsvRecorder(tmp_path / "plan.csv", tmp_path / "mig.csv")
    res = simulate(sc, GoodputOnly(), forecast_mode=default_forecast_mode(sc), recorders=[mem, csv])
    assert mem.meta["policy"] == "goodput-only"
    assert [r.t for r in mem.records] == [0, 1, 2, 3]
    assert mem.result is res
    assert len(mem.plan()) == len(res.plan)
    buf = io.StringIO()
    write_plan_csv(res.plan, buf)
    assert (tmp_path / "plan.csv").read_text() == buf.getvalue()
    pd.testing.assert_frame_equal(read_plan_csv(tmp_path / "plan.csv"),
                                  read_plan_csv(io.StringIO(buf.getvalue())))
    assert (tmp_path / "mig.csv").read_text().startswith("slot_start,job_id,from_region")


BASELINES = (AsapHome, CheapestAtArrival, WaitForCheap, CarbonScaling, GoodputOnly)


@st.composite
def small_scenarios(draw: st.DrawFn) -> Scenario:
    n_slots = draw(st.integers(3, 8))
    jobs = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from([1, 2, 4]))
        arrival = draw(st.integers(0, n_slots - 1))
        deadline = draw(st.one_of(st.none(), st.integers(arrival + 1, n_slots + 4)))
        jobs.append(training(f"t{i}", home=draw(st.sampled_from("ab")), arrival_slot=arrival,
                             slots_of_work=draw(st.floats(0.2, 4.0)), deadline_slot=deadline,
                             gpus=gpus, counts=(1, 2, 4)))
    for i in range(draw(st.integers(0, 2))):
        first = draw(st.integers(0, n_slots - 1))
        jobs.append(inference(f"s{i}", home=draw(st.sampled_from("ab")), first=first,
                              last=draw(st.integers(first + 1, n_slots + 2)),
                              gpus=draw(st.sampled_from([1, 2]))))
    prices = draw(st.lists(st.floats(0.1, 2.0), min_size=n_slots, max_size=n_slots))
    carbon = draw(st.lists(st.floats(50, 900), min_size=n_slots, max_size=n_slots))
    return tiny_scenario(jobs, n_slots=n_slots, price_a=prices, carbon_b=carbon,
                         gpus_a=draw(st.integers(2, 5)), gpus_b=draw(st.integers(2, 5)))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=small_scenarios(), which=st.integers(0, len(BASELINES) - 1))
def test_baselines_never_exceed_capacity_and_every_job_is_accounted_for(
    sc: Scenario, which: int
) -> None:
    res = simulate(sc, BASELINES[which](), forecast_mode=default_forecast_mode(sc))
    running = res.plan[res.plan["n_gpus"] > 0]
    used = running.groupby(["slot", "region", "gpu_type"])["n_gpus"].sum()
    cap = {(p.datacenter, p.gpu_type): p.count for p in sc.pools}
    for (_, dc, g), n in used.items():
        assert n <= cap[(dc, g)]
    tr = res.jobs[res.jobs["kind"] == "training"]
    for _, row in tr.iterrows():
        assert bool(row["finished"]) or row["reason"], row["job_id"]
        if row["finished"]:
            done = res.plan.loc[res.plan["job_id"] == row["job_id"], "progress"].sum()
            assert done == pytest.approx(1.0)
    assert res.metrics["jobs_finished"] + res.metrics["jobs_unfinished"] == len(tr)
    assert res.metrics["energy_kwh"] == pytest.approx(res.slots["energy_kwh"].sum())
    assert (res.plan["energy_kwh"] >= 0).all()


def test_inference_ending_mid_slot_is_charged_for_the_part_it_ran() -> None:
    """The plan's promise: a job that finishes mid-slot pays only for the part it used."""
    import dataclasses
    from datetime import timedelta

    svc = inference("svc", last=2)
    svc = dataclasses.replace(svc, end=svc.end - timedelta(seconds=SLOT_S / 4))
    sc = tiny_scenario([svc], n_slots=3)
    res = simulate(sc, Scripted({0: {"svc": on("a")}, 1: {"svc": on("a")}}),
                   forecast_mode=default_forecast_mode(sc))
    rows = res.plan.set_index("slot")
    assert list(rows["action"]) == ["start", "finish"]
    assert rows.loc[1, "used_s"] == pytest.approx(0.75 * SLOT_S)
    assert rows.loc[1, "energy_kwh"] == pytest.approx(0.75 * rows.loc[0, "energy_kwh"])


def test_predicted_speed_is_planned_slow_near_the_deadline_until_observed() -> None:
    from dataclasses import replace

    jobs = [training("tight", slots_of_work=3.0, deadline_slot=4),
            training("loose", slots_of_work=3.0, deadline_slot=40)]
    base = tiny_scenario(jobs, n_slots=6)
    predicted = replace(base, profiles=tuple(replace(p, step_time_interval=(0.5, 2.0))
                                             for p in base.profiles))
    pol = Scripted(script={1: {"tight": on("a"), "loose": on("a")}})
    simulate(predicted, pol, forecast_mode=default_forecast_mode(predicted), noise=0.0)
    first = {j.job.job_id: j.throughput_scale for j in pol.seen[0].jobs}
    assert first == {"tight": pytest.approx(0.5), "loose": 1.0}  # 1 / hi near the deadline
    after = {j.job.job_id: j.throughput_scale for j in pol.seen[2].jobs}
    assert after["tight"] == pytest.approx(1.0, abs=0.05)  # observed: the estimate takes over
    pol_fit = Scripted()
    simulate(base, pol_fit,
             forecast_mode=default_forecast_mode(base), noise=0.0)  # fitted profiles: no caution
    assert {j.throughput_scale for j in pol_fit.seen[0].jobs} == {1.0}
def test_a_policy_cannot_read_a_future_price_or_arrival() -> None:
    # Structurally: the state holds the scenario's static view (no grid, no jobs), and the
    # default forecast for market prices is seasonal naive, not the truth.
    late = training("late", arrival_slot=3, slots_of_work=1.0)
    sc = tiny_scenario([training("now", slots_of_work=1.0), late], n_slots=6,
                       price_a=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    seen: list[tuple[SlotState, Forecast]] = []

    class Snoop:
        name = "snoop"

        def reset(self, scenario: object) -> None:
            assert not hasattr(scenario, "grid") and not hasattr(scenario, "jobs")

        def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
            seen.append((state, forecast))
            with pytest.raises(AttributeError):
                state.scenario.grid  # type: ignore[attr-defined]  # noqa: B018
            with pytest.raises(AttributeError):
                state.scenario.jobs  # type: ignore[attr-defined]  # noqa: B018
            return Allocation(placements={})

    res = simulate(sc, Snoop(), forecast_mode=default_forecast_mode(sc))
    assert res.meta["forecast_mode"] == "seasonal-naive"
    state0, fc0 = seen[0]
    assert [js.job.job_id for js in state0.jobs] == ["now"]  # the later job is unknown
    a = fc0.region_index("ra")
    assert fc0.price_per_kwh[0, a] == 1.0  # now is metered
    assert not np.any(fc0.price_per_kwh[1:, a] == [2.0, 3.0, 4.0, 5.0, 6.0])  # no future
    # Perfect foresight stays available, as an explicit what-if.
    seen.clear()
    assert simulate(sc, Snoop(), forecast_mode="perfect").meta["forecast_mode"] == "perfect"
    assert seen[0][1].price_per_kwh[1:, a].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]


def test_a_power_cap_holds_in_the_metered_plan_and_a_blind_policy_is_reported() -> None:
    from workbench.policies.lyapunov import LyapunovPolicy

    jobs = [training(f"j{i}", slots_of_work=3.0, deadline_slot=8, counts=(1, 2, 4))
            for i in range(3)]
    sc = tiny_scenario(jobs, n_slots=8)
    cap = 0.5  # kW per datacenter: about one GPU's facility power
    capped = simulate(sc, LyapunovPolicy(caps=Caps(power_kw=cap)),
                      forecast_mode=default_forecast_mode(sc))
    meter = capped.slots[[site_key("grid_import_kw", d.name) for d in sc.datacenters]]
    assert meter.to_numpy().max() <= cap * (1 + 1e-6)
    assert capped.metrics["power_cap_violations"] == 0
    assert capped.metrics["power_cap_kw"] == cap
    # asap-home cannot honour a power cap: metered, counted and warned about, never silent.
    blind = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc),
                     caps=Caps(power_kw=cap), meter_only=True)
    assert blind.metrics["power_cap_violations"] > 0
    assert any("power cap missed" in w for w in blind.warnings)
