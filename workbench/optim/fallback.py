"""The greedy feasible answer to the slot problem, and "solve the slot MILP, else that answer".

:func:`greedy_choice` walks the jobs once, inference services first, then training jobs in
descending ``priority``; each job takes its best-``coef`` option that still fits every
built-in constraint of :class:`~workbench.optim.slot.SlotProblem` (every row family of
:meth:`~workbench.optim.slot.SlotProblem.rows`: pool capacity, power caps, link volume,
supply rows). A training job takes an option only when its ``coef`` is positive.
The result is feasible by construction, though not optimal. Constraints added through the
MILP's ``extra_constraints`` hook are not known to it.

:func:`solve_or_greedy` is how a per-slot policy decides a slot: the slot MILP (the fast
path or the Pyomo model), and the greedy answer when that fails or times out, reported
as a fallback in the returned :class:`~workbench.optim.info.SolveInfo`.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from numpy.typing import NDArray

from workbench.optim.fastslot import FastSlotSolver
from workbench.optim.info import SolveInfo
from workbench.optim.slot import ExtraConstraints, SlotProblem, pyomo_solver, stack_rows

log = logging.getLogger(__name__)


def greedy_choice(
    prob: SlotProblem, priority: NDArray[np.float64] | None = None
) -> NDArray[np.bool_]:
    """Choose at most one option per job, greedily and feasibly.

    Parameters
    ----------
    prob : SlotProblem
        The slot problem; ``coef`` ranks options within a job.
    priority : float array (J,), optional
        Order of training jobs (higher first); defaults to each job's best ``coef``.

    Returns
    -------
    bool array (K,)
        The chosen options. A must-place job with no option that fits is left out and
        logged as a warning (no feasible allocation places it).
    """
    n_jobs = len(prob.job_ids)
    chosen = np.zeros(prob.n_options, dtype=bool)
    if prob.n_options == 0:
        return chosen
    st = stack_rows(prob.rows())
    left = st.upper.copy()
    order_rows = np.argsort(prob.job_index, kind="stable")
    bounds = np.searchsorted(prob.job_index[order_rows], np.arange(n_jobs + 1))
    best = np.full(n_jobs, -np.inf)
    np.maximum.at(best, prob.job_index, prob.coef)
    prio = best if priority is None else np.asarray(priority, dtype=float)
    must = prob.must_place
    # Inference first (by fewest options, the hardest to place), then training by priority.
    n_opts = np.diff(bounds)
    job_order = sorted(range(n_jobs), key=lambda j: (not must[j], n_opts[j] if must[j] else 0,
                                                     -prio[j]))
    for j in job_order:
        rows = order_rows[bounds[j]:bounds[j + 1]]
        if rows.size == 0:
            continue
        rows = rows[np.argsort(-prob.coef[rows], kind="stable")]
        if not must[j]:
            rows = rows[prob.coef[rows] > 0]
        hit = np.flatnonzero(st.fits(left, rows, 1e-9))
        if hit.size:
            chosen[rows[hit[0]]] = True
            st.draw(left, int(rows[hit[0]]))
        elif must[j]:
            # Reported by the simulator as unserved inference, once per run.
            log.debug("greedy: no feasible option left for must-place job %s",
                      prob.job_ids[j])
    return chosen


def solve_or_greedy(
    prob: SlotProblem,
    keep: NDArray[np.bool_],
    priority: NDArray[np.float64],
    *,
    t: int,
    solver: str,
    fast: FastSlotSolver,
    mip_rel_gap: float,
    time_limit_s: float,
    extra_constraints: ExtraConstraints | None = None,
) -> tuple[NDArray[np.int64], SolveInfo]:
    """The option rows a per-slot policy runs, and how the solve went.

    The slot MILP over the ``keep`` options, by the fast path (``solver="fast"``, ``fast``
    keeps its state between slots) or the Pyomo model (``"pyomo"`` or ``"pyomo:NAME"``,
    :func:`workbench.optim.slot.pyomo_solver`); when that fails or times out, the greedy
    feasible allocation (:func:`greedy_choice`, ``priority`` per job), reported as a
    fallback in the returned :class:`SolveInfo`.
    """
    rows = np.flatnonzero(keep)
    sub = prob.subset(keep)
    t0 = time.perf_counter()
    chosen: NDArray[np.int64] | None
    name = pyomo_solver(solver)
    if name is None:
        full, info = fast(prob, keep=keep, mip_rel_gap=mip_rel_gap, time_limit_s=time_limit_s,
                          extra_constraints=extra_constraints)
        chosen = None if full is None else np.flatnonzero(full)
    else:
        from workbench.optim.slotpyomo import solve_slot_problem  # Pyomo only on this path

        choice, info = solve_slot_problem(sub, mip_rel_gap=mip_rel_gap,
                                          time_limit_s=time_limit_s,
                                          extra_constraints=extra_constraints, solver=name)
        chosen = None if choice is None else rows[choice]
    if chosen is None:
        msg = (f"slot {t}: MILP {info.status} ({info.message}); "
               f"using the greedy feasible allocation")
        log.debug(msg)  # the simulator reports fallbacks (SolveInfo.fallback)
        chosen = rows[greedy_choice(sub, priority=priority)]
        info = SolveInfo(status=info.status, solve_s=time.perf_counter() - t0,
                         fallback=True, message=msg)
    return chosen, info
