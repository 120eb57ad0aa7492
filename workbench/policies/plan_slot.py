"""From the look-ahead's window plan to the slot (:mod:`workbench.policies.lookahead`): the
slot MILP's coefficients from the plan's prices and its shares of the slot, and the chosen
options as placements with their reasons.

Per option ``i`` of training job ``j``::

    coef_i = mu_j * worth_i - cost_i - q * carbon_i + mu_j * pmax_j * share_i

``worth_i`` the option's progress (a full slot's work at least where it finishes the job:
the slot is paid whole), ``share_i`` the share of the current slot's block the plan runs
the job on the option's configuration (in [0, 1]; the first blocks of a window are single
slots, so it is the plan's decision for this very slot); an inference service's options
``-cost_i - q * carbon_i``. Deadlines are kept by the deadline rule's slot half
(:meth:`workbench.policies.deadlines.DeadlineRule.slot`), not by these coefficients.

The share is the plan's for the slot, not a quota of slots over the re-plan period: with a
quota, a job the plan runs in the period's last, cheapest slots had its bonus in the first,
dearer ones and ran there, and work was pulled out of the sunny slots the plan gave it
(docs/results.md, section 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench.optim.blocklp import BlockConfig
from workbench.optim.info import SolveInfo
from workbench.policies.base import JobState, Placement, SlotOptions, SlotState
from workbench.policies.supplyplan import prefer_progress
from workbench.policies.window import WindowPlan


def plan_coefficients(
    state: SlotState, opts: SlotOptions, plan: WindowPlan,
    configs: Callable[[Any], list[BlockConfig]], *, carbon_price_per_kg: float,
    wait_unpriced: bool, balanced_sites: Sequence[str] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The slot MILP's coefficient of every option (module docstring), each option's job
    price ``mu`` and each job's fastest progress ``pmax``.

    A training job the plan does not know is unpriced (``mu = 0``: it waits for the next
    re-plan, the completion rule runs it if it cannot) when ``wait_unpriced``, else priced
    at 1.1 times its dearest option's cost per progress now (it runs rather than waits).
    At ``balanced_sites`` (the supply plan's), ties break toward the plan and progress
    (:func:`workbench.policies.supplyplan.prefer_progress`).
    """
    n_jobs = len(state.jobs)
    # The carbon price of each option: the internal one plus, under a budget, the plan's
    # price of a kg in the option's budget (its carbon row's dual).
    q = carbon_price_per_kg + np.array(
        [plan.carbon_price_by_dc.get(str(d), 0.0) for d in opts.datacenter], dtype=float)
    # Integral decisions from the plan: a job gets the bonus on the configurations the
    # plan runs it on in this slot's block, in proportion to the block's share.
    coef = -(opts.cost + q * opts.carbon_kg)
    mu_opt = np.zeros(len(opts))
    pmax = np.zeros(n_jobs)
    if len(opts):
        np.maximum.at(pmax, opts.job_index, opts.progress)
    # Each job's rows in order (the options come job by job: ``order`` is the identity).
    order = np.argsort(opts.job_index, kind="stable")
    bounds = np.searchsorted(opts.job_index[order], np.arange(n_jobs + 1))
    plan_share = np.zeros(len(opts))
    block = plan.block_of(state.t)
    # Each option's configuration as Python values (one conversion, not one per lookup).
    opt_cfg = list(zip(opts.datacenter.tolist(), opts.gpu_type.tolist(),
                       opts.n_gpus.tolist(), strict=True)) if len(opts) else []
    for j, js in enumerate(state.jobs):
        if not js.job.is_training:
            continue
        jid = js.job.job_id
        rows = order[bounds[j]:bounds[j + 1]]
        if rows.size == 0:
            continue
        if jid in plan.mu:
            mu = float(plan.mu[jid])
        elif wait_unpriced:
            # A new job waiting for the next re-plan: unpriced (the completion rule runs
            # it if it cannot wait).
            mu = 0.0
        else:
            # No plan for this job (the window LP failed): price its progress at its
            # dearest option now, so that it runs (cheapest first) rather than waits.
            ok = opts.progress[rows] > 0
            mu = 1.1 * float(np.max(opts.cost[rows][ok] / opts.progress[rows][ok],
                                    initial=0.0))
        mu_opt[rows] = mu
        sh = plan.share.get((jid, block))
        bonus = (np.minimum([sh.get(opt_cfg[k], 0.0) for k in rows.tolist()], 1.0)
                 if sh else np.zeros(rows.size))
        plan_share[rows] = bonus
        # A job that finishes in this slot pays the whole slot whatever work is left:
        # value its last slot at a full slot's work, or its tail is never worth running.
        full = max((c.rate for c in configs(js.job)), default=0.0) * js.throughput_scale
        fin = opts.progress[rows] >= js.remaining - 1e-9
        worth = np.where(fin, np.maximum(opts.progress[rows], full), opts.progress[rows])
        coef[rows] += mu * worth + mu * pmax[j] * bonus
    if balanced_sites is not None:
        prefer_progress(opts, coef, pmax, balanced_sites, plan_share)
    return coef, mu_opt, pmax


def plan_placements(
    state: SlotState, opts: SlotOptions, chosen: NDArray[np.int64],
    coef: NDArray[np.float64], keep: NDArray[np.bool_], forced: NDArray[np.bool_],
) -> tuple[dict[str, Placement], dict[str, str], dict[str, float]]:
    """The chosen options as placements, with a reason for each move and each run the
    deadline rule forced (``forced``, per job), and each move's gain (:func:`move_gain`)."""
    placements: dict[str, Placement] = {}
    reasons: dict[str, str] = {}
    gains: dict[str, float] = {}
    for k in chosen.tolist():
        js = state.jobs[int(opts.job_index[k])]
        jid = js.job.job_id
        placements[jid] = opts.placement(k)
        if opts.moves[k]:
            gains[jid] = gain = move_gain(
                opts, coef, keep, k, js, may_pause=not forced[int(opts.job_index[k])])
            where = f"move {js.last_datacenter}->{opts.datacenter[k]}"
            reasons[jid] = (f"{where}: the window plan's gain pays for the round trip"
                            if gain > 0 else f"{where}: worth less to this job than "
                            "staying; the slot's plan moved it to free capacity for "
                            "others")
        if forced[int(opts.job_index[k])]:
            rule = "no slack left before its deadline: must run (completion rule)"
            reasons[jid] = f"{reasons[jid]}; {rule}" if jid in reasons else rule
    return placements, reasons, gains


def move_gain(opts: SlotOptions, coef: NDArray[np.float64], keep: NDArray[np.bool_],
              k: int, js: JobState, may_pause: bool = True) -> float:
    """A chosen move's gain over the job's best way to stay, in the slot objective's
    units (currency): ``coef[k] - max(coef of its kept options in its own datacenter,
    0 for a training job that may pause)``; a job the completion rule makes run
    (``may_pause`` False) compares with running where it is."""
    own = (opts.job_index == opts.job_index[k]) & keep & ~np.asarray(opts.moves, bool)
    best = float(coef[own].max()) if own.any() else -np.inf
    if js.job.is_training and may_pause:
        best = max(best, 0.0)
    return float(coef[k] - best) if np.isfinite(best) else float(coef[k])


def with_plan(info: SolveInfo, plan: WindowPlan, t: int, lp_failed: str) -> SolveInfo:
    """The slot's solve with the window plan's: its time when it was solved at ``t``, its
    failure (a fallback, with its message)."""
    return SolveInfo(status=info.status, solve_s=info.solve_s + (
        plan.solve_s if plan.t0 == t else 0.0), objective=info.objective, gap=info.gap,
        fallback=info.fallback or bool(lp_failed),
        message="; ".join(m for m in (lp_failed, info.message) if m))
