"""The one deadline rule (:mod:`workbench.policies.deadlines`): one margin sets the window's
planned end, its need and the slot's completion rule, and it alone keeps the deadlines."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from helpers_policies import run_slots, tiny_scenario, training_job

from workbench.model import Job
from workbench.policies.base import JobState, Placement, SlotState
from workbench.policies.deadlines import DeadlineRule, pace_need, urgency
from workbench.policies.lookahead import LookaheadPolicy


def _state(job: Job, remaining: float, placement: Placement | None = None) -> JobState:
    return JobState(job=job, remaining=remaining, placement=placement, last_datacenter="a",
                    phi=200.0)


def test_the_planned_end_is_the_deadline_less_the_margin_of_the_life() -> None:
    job = training_job("j1", "a", 10.0, arrival_slot=10, deadline_slot=50)
    sc = tiny_scenario([job], n_slots=60).view()
    rule = DeadlineRule(margin=0.1)
    js = _state(job, 1.0)
    # D' = 50 - 0.1 * (50 - 10) = 46.
    assert rule.planned_left(sc, js, 10) == 36
    assert rule.planned_left(sc, js, 45) == 1
    # Past D' (inside its margin) the job may use the time to its deadline.
    assert rule.planned_left(sc, js, 47) == 3
    assert rule.planned_left(sc, js, 52) == 1
    free = training_job("j2", "a", 10.0)
    free_sc = tiny_scenario([free], n_slots=60).view()
    assert rule.planned_left(free_sc, _state(free, 1.0), 20) == 40  # the horizon's end


def test_the_window_asks_the_pace_to_the_planned_end_and_a_paused_jobs_restart() -> None:
    job = training_job("j1", "a", 10.0, deadline_slot=50)
    sc = tiny_scenario([job], n_slots=60).view()
    rule = DeadlineRule(margin=0.1, restart_s=sc.slot_s / 4)
    pol = LookaheadPolicy(window_h=4.0)
    pol.reset(sc)  # type: ignore[arg-type]
    cfgs = pol._configs(job)
    restart = 0.25 * max(c.rate for c in cfgs)
    n_win = 4
    # Planned end at slot 45: at t = 0 the line asks 4/45 of the job, and a paused job pays
    # its restart on top; a running one does not.
    end, need = rule.window(sc, _state(job, 1.0), cfgs, 0, n_win)
    assert end == n_win and need == pytest.approx(4 / 45 + restart)
    running = _state(job, 1.0, Placement("a", "A100", 2, 128))
    assert rule.window(sc, running, cfgs, 0, n_win)[1] == pytest.approx(4 / 45)
    # A job ahead of its line is asked nothing (and no restart).
    assert rule.window(sc, _state(job, 0.2), cfgs, 20, n_win) == (n_win, 0.0)
    # Within reach of the planned end: all of it, by then.
    end, need = rule.window(sc, running, cfgs, 43, n_win)
    assert (end, need) == (2, 1.0)
    assert pace_need(0.5, 0, 10, 3, 4) == 0.5


def test_one_margin_sets_the_window_and_the_completion_rule() -> None:
    """The slot half's usable time ends where the window half plans the job to finish:
    a job whose best option needs exactly the slots to its planned end is urgent now, and
    one slot's less work is not."""
    job = training_job("j1", "a", 8.0, deadline_slot=20, counts=(2,))
    sc = tiny_scenario([job], n_slots=24).view()
    rule = DeadlineRule(margin=0.1, restart_s=0.0)
    pol = LookaheadPolicy(window_h=48.0, restart_s=0.0)
    pol.reset(sc)  # type: ignore[arg-type]
    left = rule.planned_left(sc, _state(job, 1.0), 10)     # slot 18 - 10 = 8 slots

    def urgent(remaining: float) -> bool:
        state = SlotState(scenario=sc, t=10, time=sc.start + timedelta(seconds=10 * sc.slot_s),
                          jobs=(_state(job, remaining, Placement("a", "A100", 2, 128)),))
        price = {"a": 1.0, "b": 1.0}
        opts, _ = pol._slot_options(state, price, price)
        return bool(urgency(state, opts, restart_s=0.0, margin=rule.margin).urgent[0])

    assert left == 8
    assert urgent(left / 8.0)                  # 8 slots of work, 8 slots to the planned end
    assert not urgent((left - 1.5) / 8.0)      # it can wait a slot


@pytest.mark.parametrize("margin", [0.0, 0.1, 0.3])
def test_the_rule_alone_keeps_a_deadline_whose_cheap_hours_lie_in_the_margin(
        margin: float) -> None:
    """Cheap power only in the deadline's last slots: the look-ahead (whose only deadline
    guard is the rule) finishes the job by its deadline, and by its planned end where
    the margin leaves one."""
    job = training_job("j1", "a", 6.0, deadline_slot=20, counts=(2,))
    prices = [[3.0, 3.0]] * 16 + [[0.5, 0.5]] * 8
    sc = tiny_scenario([job], prices=prices, n_slots=24)
    res = run_slots(sc, LookaheadPolicy(window_h=6.0, deadline_margin=margin, restart_s=0.0))
    assert not res.deadline_misses and "j1" in res.finished
    planned_end = 20 - int(np.ceil(margin * 20))
    assert res.finished["j1"] < max(planned_end, 1) + 1
