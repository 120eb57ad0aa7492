"""Runs compared like for like: work left undone charged at a stated price, the bound on
equal work, and the one comparison every face shows."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from helpers_sim import tiny_scenario, training

from workbench.equal_work import (
    EQUAL_WORK_KEYS,
    bound_equal_work,
    equal_work,
    like_for_like,
    remaining_work,
    work_prices,
)
from workbench.metrics import compute_metrics
from workbench.runner import RunSpec, simulate_spec


def _scenario(**kw):
    # Dear elsewhere, so the hindsight bound of a lone job runs it at home.
    jobs = kw.pop("jobs", (training("j1", slots_of_work=2.0), training("j2", slots_of_work=3.0)))
    return tiny_scenario(jobs=jobs, n_slots=16, price_a=[1.0], price_b=[5.0], **kw)


def _plan(rows):
    return pd.DataFrame(rows, columns=["job_id", "progress", "cost"])


def test_the_stated_price_is_the_least_energy_at_home_at_its_mean_price() -> None:
    """A lone job at a constant price: its hindsight bound (the LP picks the least-energy
    configuration at home) costs exactly the stated price of its whole work."""
    sc = _scenario(jobs=(training("j1", slots_of_work=2.0),))
    price, kg = work_prices(sc, sc.jobs)["j1"]
    _, bound = simulate_spec(RunSpec(sc.name, "offline", baseline=False, power_limits=()), sc)
    assert bound is not None
    assert price == pytest.approx(bound.cost, rel=1e-9)
    # With the default menu of GPU power limits the bound does the work on less energy: the
    # stated price (full power) charges undone work at no less than the bound would pay.
    _, limited = simulate_spec(RunSpec(sc.name, "offline", baseline=False), sc)
    assert limited is not None and limited.cost <= price * (1 + 1e-9)
    assert kg == pytest.approx(price * 600.0 / 1000.0)  # the same kWh at 600 g/kWh


def test_work_left_undone_is_charged_and_finished_work_is_not() -> None:
    sc = _scenario()
    prices = work_prices(sc, sc.jobs)
    done = _plan([("j1", 0.5, 1.0), ("j1", 0.5, 1.0), ("j2", 1.0, 3.0)])
    assert remaining_work(done, sc) == {}
    full = equal_work(done, sc, 5.0, 2.0)
    assert full["unfinished_charge"] == 0.0 and full["equal_work_cost"] == 5.0
    half = _plan([("j1", 0.5, 1.0), ("j2", 0.25, 0.8)])
    left = remaining_work(half, sc)
    assert left == pytest.approx({"j1": 0.5, "j2": 0.75})
    got = equal_work(half, sc, 1.8, 1.0)
    charge = 0.5 * prices["j1"][0] + 0.75 * prices["j2"][0]
    assert got["unfinished_charge"] == pytest.approx(charge)
    assert got["equal_work_cost"] == pytest.approx(1.8 + charge)
    assert got["unfinished_work_jobs"] == pytest.approx(1.25)
    assert got["equal_work_carbon_kg"] == pytest.approx(
        1.0 + 0.5 * prices["j1"][1] + 0.75 * prices["j2"][1])
    # A job that never ran (no rows) is left whole; float residue is not work left.
    none = _plan([("j1", 1.0 - 1e-9, 2.0)])
    assert remaining_work(none, sc) == {"j2": 1.0}


def test_every_run_has_the_equal_work_metrics() -> None:
    sc = _scenario()
    res, _ = simulate_spec(RunSpec(sc.name, "asap-home", baseline=False), sc)
    m = compute_metrics(res, sc)
    assert set(EQUAL_WORK_KEYS) <= set(m)
    assert m["jobs_unfinished"] == 0 and m["equal_work_cost"] == pytest.approx(m["cost"])
    # Cut at half the horizon: the same jobs, less work done, charged for the rest.
    short = tiny_scenario(jobs=sc.jobs, n_slots=3, price_a=[1.0], price_b=[5.0])
    cut, _ = simulate_spec(RunSpec(short.name, "asap-home", baseline=False), short)
    mc = compute_metrics(cut, short)
    assert mc["jobs_unfinished"] > 0 and mc["unfinished_charge"] > 0
    assert mc["equal_work_cost"] == pytest.approx(mc["cost"] + mc["unfinished_charge"])


def test_the_bound_on_equal_work_charges_its_share_beyond_the_horizon() -> None:
    """A deadline after the horizon: the bound does only the share due inside it; the rest
    is charged at the stated price, so the bound stays below a run that did it all."""
    from workbench.policies.deadlines import required_share

    job = training("late", slots_of_work=6.0, deadline_slot=32)
    sc = _scenario(jobs=(job,))
    share = required_share(sc, job)
    assert 0 < share < 1
    bound = {"cost": 3.0, "carbon_kg": 1.0, "kind": "lp-relaxation"}
    price, kg = work_prices(sc, sc.jobs)["late"]
    got = bound_equal_work(bound, sc)
    assert got["equal_work_cost"] == pytest.approx(3.0 + (1 - share) * price)
    assert got["equal_work_carbon_kg"] == pytest.approx(1.0 + (1 - share) * kg)
    res, b = simulate_spec(RunSpec(sc.name, "offline", baseline=False), sc)
    assert res.meta["bound"]["equal_work_cost"] <= compute_metrics(res, sc)[
        "equal_work_cost"] + 1e-9


@pytest.mark.parametrize(("run", "base", "saving_pct", "jobs_pct", "bill_pct", "like"), [
    # Half the plan's part by leaving work undone: 10 of its 100 saved on equal work (of a
    # bill of 1,000 with the no-jobs 900: 10 / 1,000 = 1 %), not like for like.
    ({"cost": 50.0, "equal_work_cost": 90.0, "bill_total": 950.0, "jobs_unfinished": 3,
      "deadline_misses": 0},
     {"cost": 100.0, "equal_work_cost": 100.0, "bill_total": 1000.0, "jobs_unfinished": 0,
      "deadline_misses": 0},
     1.0, 10.0, 5.0, False),
    # Both finish everything: the two savings agree.
    ({"cost": 80.0, "equal_work_cost": 80.0, "bill_total": 180.0, "jobs_unfinished": 0,
      "deadline_misses": 1},
     {"cost": 100.0, "equal_work_cost": 100.0, "bill_total": 200.0, "jobs_unfinished": 0,
      "deadline_misses": 1},
     10.0, 20.0, 10.0, True),
])
def test_like_for_like(run, base, saving_pct, jobs_pct, bill_pct, like) -> None:
    bound = {"cost": 60.0, "carbon_kg": 1.0, "equal_work_cost": 75.0}
    replay = {"cost": 70.0, "equal_work_cost": 95.0}
    cmp = like_for_like(run, base, bound, replay)
    assert cmp.saving == pytest.approx(base["equal_work_cost"] - run["equal_work_cost"])
    assert cmp.saving_pct == pytest.approx(saving_pct)
    assert cmp.jobs_saving_pct == pytest.approx(jobs_pct)
    assert cmp.bill_saving_pct == pytest.approx(bill_pct)
    assert cmp.like_for_like_bill is like
    assert cmp.above_bound_pct == pytest.approx(100 * (run["equal_work_cost"] / 75.0 - 1))
    assert cmp.above_replay_pct == pytest.approx(100 * (run["equal_work_cost"] / 95.0 - 1))
    d = cmp.as_dict()
    assert d["basis"].startswith("equal work")


def test_like_for_like_without_references_is_nan_not_zero() -> None:
    cmp = like_for_like({"cost": 5.0, "equal_work_cost": 5.0})
    assert math.isnan(cmp.saving_pct) and math.isnan(cmp.above_bound_pct)
    assert cmp.as_dict()["saving_pct"] is None
    # A run stored before the equal-work metrics: NaN, not its bill.
    old = like_for_like({"cost": 5.0}, {"cost": 9.0})
    assert math.isnan(old.saving_pct) and old.bill_saving_pct == pytest.approx(100 * 4 / 9)
