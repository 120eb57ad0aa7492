"""The one slot-outcome model: charges of a placement, and the slot it gives, as used by the
simulator (truth) and slot_options (prediction)."""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta

import numpy as np
import pytest
from helpers_sim import SLOT_S, START, profile, tiny_scenario, training
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import outcome
from workbench.forecast import default_forecast_mode
from workbench.model import GpuPool, Scenario, ScenarioError
from workbench.policies.base import Allocation, Placement, SlotState, slot_options
from workbench.sim import simulate


def _job(dataset_gb: float = 100.0, checkpoint_gb: float = 2.0, work: float = 3.0):  # type: ignore[no-untyped-def]
    return dataclasses.replace(training("j", slots_of_work=work), dataset_gb=dataset_gb,
                               checkpoint_gb=checkpoint_gb)


def _charges(job, dc, gpu="A100", n=1, previous=None, ckpt=None, data=(), pending=0.0):  # type: ignore[no-untyped-def]
    sc = tiny_scenario([job])
    return outcome.move_charges(job, dc, gpu, n, previous=previous, checkpoint_at=ckpt,
                                data_at=data, pending_s=pending, link=sc.link,
                                restart_s=120.0, resize_s=30.0)


def test_first_run_away_from_home_moves_the_dataset() -> None:
    job = _job(dataset_gb=100.0)
    home = _charges(job, "a")
    assert home is not None and home.transfer_gb == 0.0 and home.restart_s == 120.0
    away = _charges(job, "b")
    assert away is not None
    assert away.dataset_gb == 100.0 and away.checkpoint_gb == 0.0
    # 8 * 100 GB / 10 Gbit/s = 80 s, plus the restart; 0.01 kWh/GB, half at each end.
    assert away.transfer_s == pytest.approx(80.0)
    assert away.lost_s == pytest.approx(200.0)
    assert away.transfer_kwh == pytest.approx(1.0)
    assert away.source_kwh == (("a", pytest.approx(0.5)),)
    # Once the dataset is there it does not travel again; the checkpoint still does.
    back = _charges(job, "b", previous=("a", "A100", 1), ckpt="a", data=("a", "b"))
    assert back is not None and back.dataset_gb == 0.0 and back.checkpoint_gb == 2.0


def test_restart_rules_type_count_and_same() -> None:
    job = _job(dataset_gb=0.0)
    same = _charges(job, "a", "A100", 2, previous=("a", "A100", 2), ckpt="a")
    resize = _charges(job, "a", "A100", 4, previous=("a", "A100", 2), ckpt="a")
    switch = _charges(job, "a", "H100", 2, previous=("a", "A100", 2), ckpt="a")
    resume = _charges(job, "a", "A100", 2, previous=None, ckpt="a")
    assert same is not None and same.lost_s == 0.0
    assert resize is not None and resize.lost_s == 30.0
    assert switch is not None and switch.lost_s == 120.0
    assert resume is not None and resume.lost_s == 120.0


def test_a_transfer_longer_than_a_slot_spans_slots() -> None:
    job = _job()
    ch = outcome.Charges(lost_s=1500.0, transfer_kwh=2.0, transfer_gb=100.0)
    first = outcome.slot_outcome(job, slot_s=900.0, pue=1.5, charges=ch, profile=profile(),
                                 n_gpus=1, batch_size=128)
    assert first.progress == 0.0 and first.lost_s == 900.0 and first.pending_s == 600.0
    assert first.used_s == 900.0 and first.energy_kwh > 1.0  # GPUs held, half the transfer
    assert first.movement_kwh == pytest.approx(first.energy_kwh - 1.0 + 2.0)


def _with_h100(sc: Scenario) -> Scenario:
    pool = GpuPool("a", "H100", 4, idle_power_w=70.0, max_power_w=700.0)
    return dataclasses.replace(sc, pools=(*sc.pools, pool),
                               profiles=(*sc.profiles, profile(gpu_type="H100", speed=2.0)))


class Script:
    name = "script"

    def __init__(self, script: dict[int, Placement]) -> None:
        self.script = script

    def reset(self, scenario: object) -> None:
        pass

    def decide(self, state: SlotState, forecast: object) -> Allocation:
        p = self.script.get(state.t)
        return Allocation(placements={} if p is None else {"j": p})


def test_simulator_charges_a_gpu_type_switch_and_a_first_remote_placement() -> None:
    job = _job(dataset_gb=1500.0, work=20.0)  # 8 * 1500 / 10 = 1200 s: more than a slot
    sc = _with_h100(tiny_scenario([job], n_slots=6))
    script = {0: Placement("b", "A100", 1, 128), 1: Placement("b", "A100", 1, 128),
              2: Placement("a", "A100", 1, 128), 3: Placement("a", "H100", 1, 128),
              4: Placement("a", "H100", 1, 128), 5: Placement("a", "H100", 1, 128)}
    res = simulate(sc, Script(script), forecast_mode=default_forecast_mode(sc), restart_s=120.0)
    plan = res.plan.set_index("slot")
    # Slot 0-1: the dataset travels to b (1200 s) and the job restarts (120 s): 1320 s lost.
    assert plan.loc[0, "transfer_gb"] == 1500.0 and plan.loc[0, "lost_s"] == SLOT_S
    assert plan.loc[0, "progress"] == 0.0 and plan.loc[0, "energy_kwh"] > 0
    assert plan.loc[1, "lost_s"] == pytest.approx(1320.0 - SLOT_S)
    # Slot 2: back home, its checkpoint moves; slot 3: the switch to H100 restarts.
    assert plan.loc[2, "transfer_gb"] == job.checkpoint_gb
    assert plan.loc[3, "lost_s"] == pytest.approx(120.0)
    assert plan.loc[4, "lost_s"] == 0.0
    mig = res.migrations
    assert mig["moved"].tolist() == ["dataset", "checkpoint"]
    assert mig.iloc[0]["from_region"] == "a" and mig.iloc[0]["to_region"] == "b"
    assert res.metrics["transfer_gb"] == pytest.approx(1500.0 + job.checkpoint_gb)
    jobs = res.jobs.set_index("job_id")
    assert jobs.loc["j", "lost_s"] == pytest.approx(plan["lost_s"].sum())


@settings(max_examples=20, deadline=None)
@given(dc=st.sampled_from(["a", "b"]), n=st.sampled_from([1, 2]), data=st.sampled_from([0.0, 50.0]),
       slot=st.integers(0, 3))
@pytest.mark.slow
def test_prediction_equals_truth_without_noise(dc: str, n: int, data: float, slot: int) -> None:
    # One model: noise-free and given the true gradient noise scale (the estimate's only
    # difference from the truth is that parameter), slot_options' row for the chosen
    # placement is what the simulator charges (progress, energy, cost, time lost, data).
    job = _job(dataset_gb=data)
    sc = tiny_scenario([job], n_slots=5)
    seen: dict[str, object] = {}

    class Probe:
        name = "probe"

        def reset(self, scenario: object) -> None:
            pass

        def decide(self, state: SlotState, forecast: object) -> Allocation:
            if state.t == slot:
                price = {r: float(sc.grid["price_per_kwh"].sel(region=r).values[slot])
                         for r in ("ra", "rb")}
                carbon = {r: float(sc.grid["carbon_g_per_kwh"].sel(region=r).values[slot])
                          for r in ("ra", "rb")}
                true = tuple(dataclasses.replace(
                    js, phi=float(profile().efficiency.phi(js.progress))) for js in state.jobs)
                opts = slot_options(dataclasses.replace(state, jobs=true), price, carbon)
                k = next(i for i in range(len(opts)) if opts.datacenter[i] == dc
                         and opts.n_gpus[i] == n)
                seen["row"] = k
                seen["opts"] = opts
                return Allocation(placements={"j": opts.placement(k)})
            if state.t < slot:
                return Allocation(placements={"j": Placement("a", "A100", 1, 128)})
            return Allocation(placements={})

    res = simulate(sc, Probe(), forecast_mode=default_forecast_mode(sc))
    row = res.plan.set_index("slot").loc[slot]
    opts, k = seen["opts"], int(seen["row"])  # type: ignore[call-overload]
    assert row["progress"] == pytest.approx(float(opts.progress[k]), rel=1e-9)  # type: ignore[attr-defined]
    assert row["energy_kwh"] == pytest.approx(float(opts.energy_kwh[k]), rel=1e-9)  # type: ignore[attr-defined]
    assert row["cost"] == pytest.approx(float(opts.cost[k]), rel=1e-9)  # type: ignore[attr-defined]
    assert row["lost_s"] == pytest.approx(float(opts.lost_s[k]))  # type: ignore[attr-defined]
    assert row["transfer_gb"] == pytest.approx(float(opts.transfer_gb[k]))  # type: ignore[attr-defined]


def test_throughput_scale_scales_power_too() -> None:
    from workbench.policies.base import JobState

    job = _job(dataset_gb=0.0)
    sc = tiny_scenario([job])
    price = {"ra": 1.0, "rb": 1.0}
    carbon = {"ra": 500.0, "rb": 500.0}

    def opts(scale: float):  # type: ignore[no-untyped-def]
        js = JobState(job=job, remaining=1.0, placement=None, last_datacenter=None, phi=200.0,
                      throughput_scale=scale)
        return slot_options(SlotState(scenario=sc.view(), t=0, time=START, jobs=(js,)),
                            price, carbon)

    slow, fast = opts(0.5), opts(1.0)
    assert np.all(slow.progress < fast.progress)
    assert np.all(slow.energy_kwh < fast.energy_kwh)  # power follows the throughput


def test_bad_knobs_are_one_line_errors() -> None:
    with pytest.raises(ScenarioError, match="dataset_gb"):
        _job(dataset_gb=-1.0)
    with pytest.raises(ScenarioError, match="dataset_gb"):
        _job(dataset_gb=math.nan)
    sc = tiny_scenario([_job()])
    for knob in ("restart_s", "resize_s"):
        for bad in (-1.0, math.nan):
            with pytest.raises(ValueError, match=knob):
                simulate(sc, Script({}), forecast_mode=default_forecast_mode(sc), **{knob: bad})
    with pytest.raises(ValueError, match="restart_s"):
        outcome.check_seconds(math.nan, "restart_s")
    assert START + timedelta(seconds=SLOT_S) > START


@settings(max_examples=40, deadline=None)
@given(n=st.sampled_from([1, 2, 4, 8]), pue=st.floats(1.0, 2.0), slot_s=st.sampled_from(
    [300.0, 900.0, 3600.0]), lo=st.floats(0.0, 0.9), work=st.floats(1e4, 1e9))
def test_full_slot_rates_are_slot_outcome_at_every_phi(n: int, pue: float, slot_s: float,
                                                       lo: float, work: float) -> None:
    """The vectorised per-slot rates equal one :func:`slot_outcome` per phi, bit for bit."""
    from workbench.outcome import best_batch, full_slot_rates, slot_outcome

    prof = profile()
    job = dataclasses.replace(training("j"), work_samples=work)
    phis = prof.efficiency.phi(np.linspace(lo, 1.0, 5))
    prog, kwh = full_slot_rates(prof, job, n, 4, slot_s, pue, phis)
    for i, ph in enumerate(phis):
        m, x = best_batch(prof, n, 4, float(ph))
        o = slot_outcome(job, slot_s=slot_s, pue=pue, remaining=math.inf, profile=prof,
                         n_gpus=n, batch_size=m, x_model_sps=x, phi=float(ph),
                         gpus_per_node=4)
        assert prog[i] == o.progress and kwh[i] == o.energy_kwh


def _reference_run(job, prof, dc, n, sc, slot_s, pue, max_slots):  # type: ignore[no-untyped-def]
    """The simulator's loop for one job alone (move_charges, then slot_outcome at the best
    batch for the true phi), slot by slot, without the fixed-point shortcut."""
    prev = ckpt = None
    data_at, pending, done = {job.home}, 0.0, 0.0
    energies, batches = [], []
    src = 0.0
    for _ in range(max_slots):
        ch = outcome.move_charges(job, dc, "A100", n, previous=prev, checkpoint_at=ckpt,
                                  data_at=data_at, pending_s=pending, link=sc.link)
        phi = float(prof.efficiency.phi(done))
        m, x = outcome.best_batch(prof, n, 4, phi)
        out = outcome.slot_outcome(job, slot_s=slot_s, pue=pue, charges=ch,
                                   remaining=1.0 - done, profile=prof, n_gpus=n,
                                   batch_size=m, x_model_sps=x, phi=phi, gpus_per_node=4)
        energies.append(out.energy_kwh)
        batches.append(m)
        src += sum(k for _, k in out.source_kwh)
        if ch.transfer_gb > 0:
            data_at.add(dc)
        prev, ckpt, pending = (dc, "A100", n), dc, out.pending_s
        if out.finishes:
            return energies, batches, src, (len(energies) - 1) * slot_s + out.used_s
        done += out.progress
    return energies, batches, src, None


@settings(max_examples=40, deadline=None)
@given(dc=st.sampled_from(["a", "b"]), n=st.sampled_from([1, 2, 4]),
       data=st.sampled_from([0.0, 50.0, 1500.0]), work=st.floats(0.05, 60.0),
       slot_s=st.sampled_from([300.0, 900.0]), pue=st.floats(1.0, 2.0))
def test_uninterrupted_run_is_the_slot_loop(dc: str, n: int, data: float, work: float,
                                            slot_s: float, pue: float) -> None:
    """The whole-run model (head slot by slot, loss-free tail as a fixed point) gives the
    slot loop's per-slot energies, batches and finish, to the last bits of a float."""
    job = dataclasses.replace(_job(dataset_gb=data, work=work))
    sc = tiny_scenario([job])
    prof = profile()
    run = outcome.uninterrupted_run(job, prof, dc, "A100", n, gpus_per_node=4, slot_s=slot_s,
                                    pue=pue, link=sc.link, max_slots=200)
    assert run is not None
    energies, batches, src, run_s = _reference_run(job, prof, dc, n, sc, slot_s, pue, 200)
    assert run.finishes == (run_s is not None)
    assert run.energy_kwh.tolist() == pytest.approx(energies, rel=1e-12)
    assert run.batch_size.tolist() == batches
    assert sum(k for _, k in run.source_kwh) == pytest.approx(src, rel=1e-12)
    if run_s is not None:
        assert run.run_s == pytest.approx(run_s, rel=1e-12)
        assert run.total_energy_kwh == pytest.approx(sum(energies) + src, rel=1e-12)
    else:  # beyond 200 slots: extrapolated, longer than what was simulated
        assert run.run_s > 200 * slot_s
