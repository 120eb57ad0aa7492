"""No decision fed by hindsight: the runner and every policy that plans without hindsight,
run on two truths that agree up to slot ``T`` and differ after it (other prices and carbon,
another job arriving), decide every slot before ``T`` the same way.

The hindsight plan (``offline``) reads the truth by design (it is the yardstick) and is left
out; every other policy is here, with the honest forecasts that read no future value.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from helpers_sim import inference, tiny_scenario, training

from workbench.caps import Caps
from workbench.model import Scenario
from workbench.policies import POLICY_NAMES
from workbench.runner import ForecastSettings, RunSpec, run_spec

T = 6
"""The last slot the two truths share is ``T - 1``."""

DECISIONS = ["slot", "job_id", "region", "gpu_type", "n_gpus", "batch_size", "action",
             "power_limit_w"]


def _truths() -> tuple[Scenario, Scenario]:
    jobs = [training(f"j{i}", home="ab"[i % 2], arrival_slot=i, slots_of_work=2.0 + i % 3,
                     deadline_slot=14, counts=(1, 2)) for i in range(5)]
    jobs.append(inference("svc", home="b", last=16))
    rng = np.random.default_rng(7)
    price_a = rng.uniform(0.5, 1.5, 16)
    carbon_b = rng.uniform(200, 500, 16)
    one = tiny_scenario(jobs, n_slots=16, price_a=price_a, carbon_b=carbon_b)
    # The other truth: after slot T - 1 the grid changes and one more job arrives.
    later_price = price_a.copy()
    later_price[T:] = later_price[T:][::-1] * 1.7
    later_carbon = carbon_b.copy()
    later_carbon[T:] = 50.0
    two = tiny_scenario([*jobs, training("late", home="a", arrival_slot=T + 1,
                                         slots_of_work=3.0, deadline_slot=15, counts=(1, 2))],
                        n_slots=16, price_a=later_price, carbon_b=later_carbon)
    return one, two


def _with_sun(sc: Scenario) -> Scenario:
    """``sc`` with a small solar plant at ``a`` (the same sun in both truths)."""
    from workbench.supply import Source, Supply

    sun = np.array([0, 0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0], dtype=float)
    return dataclasses.replace(sc, supply=Supply(sources=(Source("pv", "a", "solar", 3.0,
                                                                  sun),)))


def _before(plan: pd.DataFrame) -> pd.DataFrame:
    rows = plan[plan["slot"].astype(int) < T][DECISIONS]
    return rows.sort_values(["slot", "job_id"]).reset_index(drop=True)


HONEST = [p for p in POLICY_NAMES if p != "offline"]
"""Every policy that plans without hindsight (follow-renewables refuses a scenario without
own supply: it is run on one with a solar plant below)."""


@pytest.mark.parametrize("policy", HONEST)
def test_every_decision_before_t_is_the_same_on_two_truths_that_differ_after_it(
        policy: str) -> None:
    one, two = _truths()
    for caps in (Caps(), Caps(carbon_kg=0.01, power_kw=4.0)):
        if caps.has_carbon and policy not in ("lookahead", "lyapunov", "threshold"):
            continue  # the policies given a carbon budget (the runner's carbon-first switch)
        spec = RunSpec(one.name, policy, baseline=False, caps=caps,
                       forecast=ForecastSettings(mode="seasonal-naive"))
        if policy == "follow-renewables":
            one, two = (_with_sun(sc) for sc in (one, two))
        a = run_spec(spec, one).result
        b = run_spec(spec, two).result
        pd.testing.assert_frame_equal(_before(a.plan), _before(b.plan), check_dtype=False)
        # The battery and every other decision leave the same meter before T.
        cols = [c for c in a.slots if c.startswith("site:grid_kwh:")]
        np.testing.assert_allclose(a.slots[cols].to_numpy()[:T], b.slots[cols].to_numpy()[:T])


def test_the_truths_do_differ_after_t() -> None:
    """The test above would pass trivially if the second truth changed nothing a plan uses:
    the hindsight plan, which reads it, plans the first slots differently."""
    one, two = _truths()
    spec = RunSpec(one.name, "offline", baseline=False)
    a = run_spec(spec, one).result
    b = run_spec(spec, two).result
    assert not _before(a.plan).equals(_before(b.plan))
    assert dataclasses.replace(one, jobs=two.jobs[:-1]).jobs == one.jobs


def test_the_carbon_first_switch_reads_no_future() -> None:
    """A budget between the two truths' hindsight least carbon: a switch decided from
    hindsight would plan one truth carbon-first and not the other from slot 0."""
    from workbench.runner import least_carbon

    one, two = _truths()
    probe = Caps(carbon_kg=1e6)
    spec = RunSpec(one.name, "lookahead", baseline=False,
                   forecast=ForecastSettings(mode="seasonal-naive"))
    floors = sorted(least_carbon(spec, sc, probe).carbon_kg for sc in (one, two))
    assert floors[0] < floors[1]
    cap = Caps(carbon_kg=0.5 * (floors[0] + floors[1]))
    capped = dataclasses.replace(spec, caps=cap)
    a, b = run_spec(capped, one).result, run_spec(capped, two).result
    assert a.meta["knobs"].get("carbon_first") == b.meta["knobs"].get("carbon_first")
    pd.testing.assert_frame_equal(_before(a.plan), _before(b.plan), check_dtype=False)


def test_a_switch_fed_by_hindsight_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: told the truth before the run (as the runner once was),
    the two truths get different switches and different first slots."""
    from workbench import runner
    from workbench.runner import least_carbon

    one, two = _truths()
    spec = RunSpec(one.name, "lookahead", baseline=False,
                   forecast=ForecastSettings(mode="seasonal-naive"))
    floors = sorted(least_carbon(spec, sc, Caps(carbon_kg=1e6)).carbon_kg for sc in (one, two))
    capped = dataclasses.replace(spec, caps=Caps(carbon_kg=0.5 * (floors[0] + floors[1])))
    monkeypatch.setattr(runner, "known_at_start", lambda spec, sc, fitted: sc)
    a, b = run_spec(capped, one).result, run_spec(capped, two).result
    assert a.meta["knobs"].get("carbon_first") != b.meta["knobs"].get("carbon_first")
