"""The slot options in arrays (slot_options) are the scalar slot model's (slot_options_scalar,
one slot_outcome call per option) bit for bit: every column, every row, in the same order."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import outcome
from workbench.forecast import default_forecast_mode
from workbench.model import Scenario
from workbench.policies import make_policy
from workbench.policies.base import (
    Allocation,
    Forecast,
    JobState,
    Placement,
    SlotOptions,
    SlotState,
    slot_options,
)
from workbench.policies.options_scalar import slot_options_scalar
from workbench.scenarios import first_hours
from workbench.sim import simulate

_FIELDS = [f.name for f in dataclasses.fields(SlotOptions) if f.name != "jobs"]


def assert_same_options(a: SlotOptions, b: SlotOptions) -> None:
    """Equal in every column, floats bit for bit (the sign of a zero included)."""
    assert len(a) == len(b)
    for name in _FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape, name
        assert x.dtype.kind == y.dtype.kind, name
        if x.dtype.kind == "f":
            assert np.array_equal(x.view(np.int64), y.view(np.int64)), name
        else:
            assert np.array_equal(x, y), name


def _prices(sc: Scenario, t: int) -> tuple[dict[str, float], dict[str, float]]:
    price = {r: float(sc.grid["price_per_kwh"].sel(region=r).values[t]) for r in sc.regions}
    carbon = {r: float(sc.grid["carbon_g_per_kwh"].sel(region=r).values[t]) for r in sc.regions}
    return price, carbon


class _Checking:
    """Delegates to a real policy; before each slot compares both forms on its state."""

    def __init__(self, inner: Any, sc: Scenario) -> None:
        self.inner, self.sc, self.name, self.checked = inner, sc, inner.name, 0

    def hindsight_bound(self) -> None:
        return None

    def reset(self, scenario: Any) -> None:
        self.inner.reset(scenario)

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        price, carbon = _prices(self.sc, state.t)
        menus: Mapping[str, tuple[int, ...]] = {js.job.job_id: (1, 2, 3, 8)
                                                for js in state.jobs[::2]}
        for kw in ({}, {"gpu_counts": menus, "restart_s": 300.0, "resize_s": 10.0}):
            assert_same_options(slot_options(state, price, carbon, **kw),  # type: ignore[arg-type]
                                slot_options_scalar(state, price, carbon, **kw))  # type: ignore[arg-type]
        self.checked += len(state.jobs)
        return self.inner.decide(state, forecast)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lyapunov", "cheapest-at-arrival"])
def test_every_slot_of_a_run_gives_the_scalar_options(seed3: Scenario, policy: str) -> None:
    # Runs that move jobs (checkpoints and datasets in flight, resizes, pauses, services).
    sc = first_hours(seed3, 30, arrivals_h=24)
    probe = _Checking(make_policy(policy), sc)
    simulate(sc, probe, forecast_mode=default_forecast_mode(sc), noise=0.1, seed=3)
    assert probe.checked > 100


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_states_give_the_scalar_options(seed3: Scenario, data: st.DataObject) -> None:
    sc = seed3
    view = sc.view()
    names = [dc.name for dc in sc.datacenters]
    jobs = data.draw(st.lists(st.sampled_from(sc.jobs), min_size=1, max_size=12, unique=True))
    states = []
    for job in jobs:
        pools = [p for p in sc.pools if job.allows(p.gpu_type)]
        placed = data.draw(st.none() | st.sampled_from(pools)) if pools else None
        placement = None if placed is None else Placement(
            placed.datacenter, placed.gpu_type,
            data.draw(st.sampled_from(job.gpu_counts or (1,))), job.batch_size)
        last = placement.datacenter if placement else data.draw(st.none() | st.sampled_from(names))
        states.append(JobState(
            job=job, remaining=data.draw(st.sampled_from([1.0, 1e-9, 0.3, 0.999]) |
                                         st.floats(1e-6, 1.0)),
            placement=placement, last_datacenter=last,
            phi=data.draw(st.floats(1.0, 1e5)),
            throughput_scale=data.draw(st.floats(0.2, 2.0)),
            data_at=tuple(data.draw(st.lists(st.sampled_from(names), max_size=2, unique=True))),
            pending_s=data.draw(st.sampled_from([0.0, 30.0, 5000.0]))))
    t = data.draw(st.integers(0, sc.n_slots - 1))
    state = SlotState(scenario=view, t=t, time=sc.slot_starts()[t], jobs=tuple(states))
    price, carbon = _prices(sc, t)
    if data.draw(st.booleans()):
        price = {r: -v for r, v in price.items()}  # negative prices occur
    kw = {"restart_s": data.draw(st.sampled_from([0.0, 120.0, 2000.0])),
          "resize_s": data.draw(st.sampled_from([0.0, 60.0]))}
    assert_same_options(slot_options(state, price, carbon, **kw),
                        slot_options_scalar(state, price, carbon, **kw))


def test_no_jobs_no_options(seed3: Scenario) -> None:
    state = SlotState(scenario=seed3.view(), t=0, time=seed3.start, jobs=())
    price, carbon = _prices(seed3, 0)
    assert_same_options(slot_options(state, price, carbon), slot_options_scalar(state, price,
                                                                                carbon))


@settings(max_examples=40, deadline=None)
@given(n=st.sampled_from([1, 2, 4, 8]), slot_s=st.sampled_from([300.0, 900.0, 3600.0]),
       owed=st.floats(0.0, 8000.0), remaining=st.floats(1e-9, 1.0), speed=st.floats(0.1, 3.0),
       phi=st.floats(1.0, 1e5), kwh=st.sampled_from([0.0, 0.3]))
def test_training_slot_outcomes_are_slot_outcome(n: int, slot_s: float, owed: float,
                                                 remaining: float, speed: float, phi: float,
                                                 kwh: float, seed3: Scenario) -> None:
    job = next(j for j in seed3.jobs if j.is_training)
    prof = seed3.profile(job.app, seed3.pools[0].gpu_type)
    m, x = outcome.best_batch(prof, n, 8, phi)
    one = outcome.slot_outcome(job, slot_s=slot_s, pue=1.3, charges=outcome.Charges(
        transfer_kwh=kwh), lost_s=owed, remaining=remaining, profile=prof, n_gpus=n,
        batch_size=m, x_model_sps=x, speed=speed, phi=phi)
    arr = outcome.training_slot_outcomes(
        slot_s=slot_s, pue=np.array([1.3]), owed_s=np.array([owed]),
        transfer_kwh=np.array([kwh]), remaining=np.array([remaining]),
        work_samples=np.array([job.work_samples]), n_gpus=np.array([n]),
        batch_size=np.array([float(m)]), x_model_sps=np.array([x]), speed=np.array([speed]),
        phi=np.array([phi]), m0=np.array([float(prof.efficiency.m0)]),
        a1_w=np.array([prof.energy.a1_w]), a2_w_per_sps=np.array([prof.energy.a2_w_per_sps]),
        max_power_w=np.array([prof.energy.max_power_w]))
    for name in ("progress", "it_power_w", "used_s", "lost_s", "pending_s", "energy_kwh",
                 "movement_kwh", "power_kw"):
        assert getattr(arr, name)[0] == getattr(one, name), name
    assert bool(arr.finishes[0]) == one.finishes
