"""A fast path for the per-slot assignment MILP: the same model as arrays, solved by highspy.

:mod:`workbench.policies.milp` stays the readable reference formulation (Pyomo). This module
builds the *same* model from the same :class:`~workbench.policies.milp.SlotProblem` arrays,
as a sparse column-wise matrix handed to HiGHS directly, and offers three ways to solve it:

``"lp-repair"``
    Solve the LP relaxation (dual simplex), keep every option the LP sets to 1, and repair
    the few fractional jobs greedily (largest weight first, within the residual capacity),
    then fill the freed capacity. The LP optimum is an upper bound ``U`` on the MILP, so the
    repaired allocation carries a certified gap ``(U - f(z)) / |U|``.
``"mip"``
    The full MILP in HiGHS, warm-started from the previous slot's allocation (options are
    matched by job, pool and GPU count) or from the LP repair.
``"auto"`` (default)
    ``lp-repair``; when its certified gap exceeds ``mip_rel_gap``, polish with the MILP
    started from the repaired allocation, within what is left of the time limit.

Maths (identical to the reference; binaries ``z[k]``, option ``k`` of job ``j(k)``)::

    max   sum_k coef[k] * z[k]
    s.t.  sum_{k in K_j} z[k] <= 1          training job j
          sum_{k in K_j} z[k]  = 1          inference job j (must place)
          sum_{k in K_p} n[k] z[k] <= C[p]   pool p        (only when it can bind)
          sum_{k in K_d} P[k] z[k] <= Pcap[d] datacenter d (finite caps only)
          sum_{k in K_l} gb[k] z[k] <= B[l]  link l         (only when it can bind)

Why the relaxation is nearly integral: the one-choice rows form a GUB structure; a basic
optimal LP solution has at most as many fractional jobs as there are binding coupling rows
(pools, power caps, links), a few dozen against hundreds or thousands of jobs.

Exact reduction: every constraint row has non-negative coefficients and every coupling row
is ``<=``, so an option of a training job with ``coef <= 0`` can be set to zero without
losing optimality; such columns get the upper bound 0.

:class:`FastSlotSolver` keeps its HiGHS object between slots: when the next slot's problem
has the same structure (same options, rows and coefficients of the matrix), only the
objective and the column bounds change and the LP restarts from the previous basis.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Literal

import highspy
import numpy as np
from numpy.typing import NDArray

from workbench.policies._highs import new_highs
from workbench.policies.base import SolveInfo
from workbench.policies.greedy import greedy_choice
from workbench.policies.milp import ExtraConstraints, SlotProblem, solve_slot_problem

log = logging.getLogger(__name__)

Method = Literal["auto", "lp-repair", "mip"]
METHODS: tuple[str, ...] = ("auto", "lp-repair", "mip")
"""Every ``method`` :class:`FastSlotSolver` accepts."""

_INT_TOL = 1e-6


@dataclass(frozen=True)
class SlotArrays:
    """The slot MILP as HiGHS arrays (column-wise sparse matrix).

    Attributes
    ----------
    coef : float array (K,)
        Objective weight per option (maximised).
    col_upper : float array (K,)
        1, or 0 for an option removed by the exact reduction or by a ``keep`` mask.
    start, index, value : arrays
        CSC matrix: entries of column ``k`` are ``index[start[k]:start[k+1]]``.
    row_lower, row_upper : float arrays (R,)
        Row bounds (``-inf``/``inf`` where open).
    n_job_rows : int
        The first rows are one-choice rows, one per job that has options.
    pool_row, dc_row, link_row : int arrays (P,), (D,), (L,)
        Row of each pool, datacenter and link, ``-1`` when it has no row (cannot bind).
    structure_key : str
        Digest of everything but ``coef`` and ``col_upper``: equal keys, same matrix.
    """

    coef: NDArray[np.float64]
    col_upper: NDArray[np.float64]
    start: NDArray[np.int32]
    index: NDArray[np.int32]
    value: NDArray[np.float64]
    row_lower: NDArray[np.float64]
    row_upper: NDArray[np.float64]
    n_job_rows: int
    pool_row: NDArray[np.int64]
    dc_row: NDArray[np.int64]
    link_row: NDArray[np.int64]
    structure_key: str

    @property
    def n_cols(self) -> int:
        return int(self.coef.size)

    @property
    def n_rows(self) -> int:
        return int(self.row_lower.size)


@dataclass(frozen=True)
class FastSolveReport:
    """What one fast solve did, with its timings (seconds) and certified gap.

    ``gap = (lp_bound - objective) / max(|lp_bound|, 1e-9)`` when the LP was solved (the LP
    optimum bounds the MILP from above); otherwise HiGHS's own MIP gap.
    """

    method: str
    status: str
    build_s: float
    solve_s: float
    extract_s: float
    objective: float | None
    lp_bound: float | None
    gap: float | None
    n_fractional: int = 0
    hot_start: bool = False
    polished: bool = False
    message: str = ""

    @property
    def total_s(self) -> float:
        return self.build_s + self.solve_s + self.extract_s


def build_arrays(prob: SlotProblem, keep: NDArray[np.bool_] | None = None) -> SlotArrays:
    """Build the slot MILP of ``prob`` as sparse arrays (see the module docstring).

    Parameters
    ----------
    prob : SlotProblem
        The same arrays the Pyomo reference is built from.
    keep : bool array (K,), optional
        Options allowed in this slot (others get upper bound 0); the default keeps all.
        Passing a mask instead of ``prob.subset(keep)`` keeps the structure from slot to
        slot, so that :class:`FastSlotSolver` can restart from the previous basis.
    """
    n_k = prob.n_options
    n_j = len(prob.job_ids)
    coef = np.asarray(prob.coef, dtype=float)
    upper = np.ones(n_k)
    if keep is not None:
        if keep.shape != (n_k,):
            raise ValueError(f"keep must have shape ({n_k},) like the options")
        upper[~keep] = 0.0
    # Exact reduction: a non-positive option of a job that may pause is never needed.
    upper[(coef <= 0) & ~prob.must_place[prob.job_index]] = 0.0

    has_opts = np.bincount(prob.job_index, minlength=n_j) > 0
    job_row = np.full(n_j, -1, dtype=np.int64)
    job_row[has_opts] = np.arange(int(has_opts.sum()))
    n_rows = int(has_opts.sum())
    lower_parts = [np.where(prob.must_place[has_opts], 1.0, -np.inf)]
    upper_parts = [np.ones(n_rows)]

    def coupling(cap: NDArray[np.float64], binds: NDArray[np.bool_]) -> NDArray[np.int64]:
        """Add one ``<= cap`` row per entry where ``binds``; return each entry's row or -1."""
        nonlocal n_rows
        row = np.full(cap.size, -1, dtype=np.int64)
        count = int(binds.sum())
        row[binds] = n_rows + np.arange(count)
        n_rows += count
        lower_parts.append(np.full(count, -np.inf))
        upper_parts.append(cap[binds].astype(float))
        return row

    n_p = len(prob.pool_labels)
    pool_use = np.bincount(prob.pool_index, weights=prob.n_gpus.astype(float), minlength=n_p)
    pool_row = coupling(prob.pool_capacity.astype(float), pool_use > prob.pool_capacity)
    n_d = len(prob.dc_labels)
    dc_has = np.bincount(prob.dc_index, minlength=n_d) > 0
    dc_row = coupling(prob.power_cap_kw.astype(float), dc_has & np.isfinite(prob.power_cap_kw))
    n_l = len(prob.link_labels)
    moving = prob.link_index >= 0
    link_use = np.bincount(prob.link_index[moving], weights=prob.transfer_gb[moving],
                           minlength=n_l)
    link_row = coupling(prob.link_capacity_gb.astype(float), link_use > prob.link_capacity_gb)

    rows = np.full((n_k, 4), -1, dtype=np.int64)
    vals = np.zeros((n_k, 4))
    rows[:, 0] = job_row[prob.job_index]
    vals[:, 0] = 1.0
    rows[:, 1] = pool_row[prob.pool_index]
    vals[:, 1] = prob.n_gpus
    rows[:, 2] = dc_row[prob.dc_index]
    vals[:, 2] = prob.power_kw
    rows[moving, 3] = link_row[prob.link_index[moving]]
    vals[:, 3] = prob.transfer_gb
    present = rows >= 0
    counts = present.sum(axis=1)
    start = np.zeros(n_k + 1, dtype=np.int32)
    np.cumsum(counts, out=start[1:])
    index = rows[present].astype(np.int32)
    value = vals[present]
    row_lower = np.concatenate(lower_parts)
    row_upper = np.concatenate(upper_parts)
    digest = hashlib.blake2b(digest_size=16)
    for arr in (start, index, value, row_lower, row_upper):
        digest.update(np.ascontiguousarray(arr).tobytes())
    return SlotArrays(
        coef=coef, col_upper=upper, start=start, index=index, value=value,
        row_lower=row_lower, row_upper=row_upper, n_job_rows=int(has_opts.sum()),
        pool_row=pool_row, dc_row=dc_row, link_row=link_row,
        structure_key=digest.hexdigest(),
    )


def _columns(arr: SlotArrays, cols: NDArray[np.int64]) -> SlotArrays:
    """The CSC arrays restricted to columns ``cols`` (rows unchanged)."""
    counts = np.diff(arr.start)[cols]
    start = np.zeros(cols.size + 1, dtype=np.int32)
    np.cumsum(counts, out=start[1:])
    take = np.repeat(arr.start[cols], counts) + (
        np.arange(int(start[-1])) - np.repeat(start[:-1], counts))
    return replace(arr, coef=arr.coef[cols], col_upper=arr.col_upper[cols], start=start,
                   index=arr.index[take], value=arr.value[take])


def _initial_columns(arr: SlotArrays, per_job: int) -> NDArray[np.int64]:
    """Each job's ``per_job`` best allowed options (every allowed one when must-place)."""
    allowed = np.flatnonzero(arr.col_upper > 0.5)
    if per_job <= 0 or allowed.size == 0:
        return allowed
    # The first entry of every column is its job's one-choice row.
    job_row = arr.index[arr.start[:-1]]
    order = allowed[np.lexsort((-arr.coef[allowed], job_row[allowed]))]
    rows = job_row[order]
    first = np.r_[0, np.flatnonzero(np.diff(rows)) + 1]
    rank = np.arange(order.size) - np.repeat(first, np.diff(np.r_[first, order.size]))
    must = arr.row_lower[rows] >= 1.0
    return np.sort(order[(rank < per_job) | must])


def _lp(arr: SlotArrays, integral: bool,
        cols: NDArray[np.int64] | None = None) -> highspy.HighsLp:
    if cols is not None:
        arr = _columns(arr, cols)
    lp = highspy.HighsLp()
    lp.num_col_ = arr.n_cols
    lp.num_row_ = arr.n_rows
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = arr.coef
    lp.col_lower_ = np.zeros(arr.n_cols)
    lp.col_upper_ = arr.col_upper
    lp.row_lower_ = arr.row_lower
    lp.row_upper_ = arr.row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = arr.start
    lp.a_matrix_.index_ = arr.index
    lp.a_matrix_.value_ = arr.value
    lp.a_matrix_.num_col_ = arr.n_cols
    lp.a_matrix_.num_row_ = arr.n_rows
    if integral:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * arr.n_cols
    return lp


def _new_highs(time_limit_s: float, threads: int | None) -> highspy.Highs:
    h = new_highs()
    h.setOptionValue("time_limit", float(time_limit_s))
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    return h


def repair(prob: SlotProblem, arr: SlotArrays, x: NDArray[np.float64]
           ) -> tuple[NDArray[np.bool_] | None, int]:
    """Round an LP solution to a feasible 0/1 choice.

    Keeps every option with ``x >= 1 - 1e-6``; then places, job by job (must-place jobs
    first, then by largest weight), the jobs left fractional or unplaced on their best
    option that fits in the residual pool, power and link capacity. Weights ``<= 0`` are
    only taken for must-place jobs.

    Returns
    -------
    choice : bool array (K,) or None
        None when a must-place job fits nowhere (the caller then solves the MILP).
    n_fractional : int
        Jobs whose LP choice was fractional.
    """
    allowed = arr.col_upper > 0.5
    chosen = (x >= 1.0 - _INT_TOL) & allowed
    n_j = len(prob.job_ids)
    mass = np.bincount(prob.job_index, weights=np.clip(x, 0.0, 1.0), minlength=n_j)
    placed = np.bincount(prob.job_index[chosen], minlength=n_j) > 0
    n_frac = int(np.sum((mass > _INT_TOL) & ~placed))

    c = chosen.astype(float)
    pool_res = prob.pool_capacity.astype(float) - np.bincount(
        prob.pool_index, weights=c * prob.n_gpus, minlength=len(prob.pool_labels))
    dc_res = prob.power_cap_kw.astype(float) - np.bincount(
        prob.dc_index, weights=c * prob.power_kw, minlength=len(prob.dc_labels))
    moving = prob.link_index >= 0
    link_res = prob.link_capacity_gb.astype(float) - np.bincount(
        prob.link_index[moving], weights=(c * prob.transfer_gb)[moving],
        minlength=len(prob.link_labels))

    cand = allowed & ~placed[prob.job_index]
    cand &= (arr.coef > 0) | prob.must_place[prob.job_index]
    rows = np.flatnonzero(cand)
    if rows.size == 0:
        return chosen, n_frac
    # Options grouped by job, best weight first; jobs ordered must-place, then best weight.
    order = np.lexsort((-arr.coef[rows], prob.job_index[rows]))
    rows = rows[order]
    jobs, first = np.unique(prob.job_index[rows], return_index=True)
    bounds = np.append(first, rows.size)
    best = arr.coef[rows[first]]
    job_order = np.lexsort((-best, ~prob.must_place[jobs]))
    tol = 1e-9
    for jpos in job_order.tolist():
        ks = rows[bounds[jpos]:bounds[jpos + 1]]
        fits = (prob.n_gpus[ks] <= pool_res[prob.pool_index[ks]] + tol)
        fits &= prob.power_kw[ks] <= dc_res[prob.dc_index[ks]] + tol
        li = prob.link_index[ks]
        mv = li >= 0
        fits[mv] &= prob.transfer_gb[ks[mv]] <= link_res[li[mv]] + tol
        hit = np.flatnonzero(fits)
        if hit.size == 0:
            if prob.must_place[jobs[jpos]]:
                return None, n_frac
            continue
        k = int(ks[hit[0]])
        chosen[k] = True
        pool_res[prob.pool_index[k]] -= prob.n_gpus[k]
        dc_res[prob.dc_index[k]] -= prob.power_kw[k]
        if prob.link_index[k] >= 0:
            link_res[prob.link_index[k]] -= prob.transfer_gb[k]
    return chosen, n_frac


def relative_gap(bound: float, objective: float) -> float:
    """``max(bound - objective, 0) / max(|bound|, 1e-9)`` for a maximisation."""
    return max(bound - objective, 0.0) / max(abs(bound), 1e-9)


@dataclass
class FastSlotSolver:
    """Solve successive slot problems fast; a drop-in for ``milp.solve_slot_problem``.

    Parameters
    ----------
    method : {"auto", "lp-repair", "mip"}
        See the module docstring.
    threads : int, optional
        HiGHS threads (default: HiGHS's choice).
    reuse : bool
        Keep the HiGHS LP between slots and restart from the previous basis when the
        structure is unchanged.
    accept_gap : float
        ``auto`` stops after the neighbourhood polish once the certified gap is at most
        ``max(mip_rel_gap, accept_gap)``.
    neighbourhood : int
        Least number of jobs the neighbourhood polish re-solves exactly.
    full_mip_max_options : int
        ``auto`` polishes with the full MILP only up to this many options.
    initial_columns : int
        Options per job in the first round of the LP's column generation.
    columns_per_round : int
        Most options added per round of column generation.

    Notes
    -----
    ``extra_constraints`` (the what-if hook) acts on a Pyomo model; when one is given the
    call is delegated to the Pyomo reference, so the hook keeps its meaning.
    """

    method: Method = "auto"
    threads: int | None = None
    reuse: bool = True
    accept_gap: float = 5e-3
    neighbourhood: int = 50
    full_mip_max_options: int = 20_000
    initial_columns: int = 8
    columns_per_round: int = 50_000
    last: FastSolveReport | None = field(default=None, init=False)
    _highs: highspy.Highs | None = field(default=None, init=False, repr=False)
    _key: str | None = field(default=None, init=False, repr=False)
    _prev: set[tuple[str, str, int]] = field(default_factory=set, init=False, repr=False)
    _cols: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64),
                                     init=False, repr=False)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; use one of {METHODS}")

    def reset(self) -> None:
        """Forget the kept model and the previous allocation (a new run)."""
        self._highs = None
        self._key = None
        self._cols = np.zeros(0, dtype=np.int64)
        self._prev = set()
        self.last = None

    def __call__(
        self,
        prob: SlotProblem,
        *,
        keep: NDArray[np.bool_] | None = None,
        mip_rel_gap: float = 1e-3,
        time_limit_s: float = 10.0,
        extra_constraints: ExtraConstraints | None = None,
    ) -> tuple[NDArray[np.bool_] | None, SolveInfo]:
        """Solve one slot; same contract as :func:`workbench.policies.milp.solve_slot_problem`.

        Returns
        -------
        choice : bool array over the options of ``prob`` (not of a subset), or None
            None when no feasible allocation was found; ``SolveInfo.status`` says why.
        info : SolveInfo
            ``status`` is ``"optimal"`` when the certified gap is within ``mip_rel_gap``,
            ``"feasible"`` when a valid allocation has a larger gap (time limit),
            otherwise HiGHS's model status; ``gap`` is the certified gap.
        """
        if (prob.n_options if keep is None else int(np.count_nonzero(keep))) == 0:
            # Nothing to decide (no active job has an option): the empty choice is optimal,
            # as in solve_slot_problem; not a failed solve, so not a fallback.
            return np.zeros(prob.n_options, dtype=bool), SolveInfo(status="empty", solve_s=0.0,
                                                                   objective=0.0)
        if extra_constraints is not None:
            sub = prob if keep is None else prob.subset(keep)
            choice, info = solve_slot_problem(sub, mip_rel_gap=mip_rel_gap,
                                              time_limit_s=time_limit_s,
                                              extra_constraints=extra_constraints)
            if choice is not None and keep is not None:
                full = np.zeros(prob.n_options, dtype=bool)
                full[np.flatnonzero(keep)[choice]] = True
                choice = full
            return choice, info
        t0 = time.perf_counter()
        arr = build_arrays(prob, keep)
        build_s = time.perf_counter() - t0
        if self.method == "mip":
            choice, rep = self._solve_mip(prob, arr, mip_rel_gap, time_limit_s, build_s,
                                          start=self._warm_start(prob, arr))
        else:
            choice, rep = self._solve_lp_repair(prob, arr, mip_rel_gap, time_limit_s, build_s)
        self.last = rep
        if choice is not None:
            self._prev = _keys(prob, choice)
        return choice, SolveInfo(status=rep.status, solve_s=rep.total_s,
                                 objective=rep.objective, gap=rep.gap, message=rep.message)

    # -- paths ---------------------------------------------------------------------------
    def _solve_lp(self, arr: SlotArrays, time_limit_s: float
                  ) -> tuple[highspy.HighsModelStatus, NDArray[np.float64],
                             NDArray[np.float64], float, bool]:
        """The LP relaxation by column generation over the allowed options.

        Starts from the kept model when the structure is unchanged (new costs and bounds,
        previous basis), else from each job's ``initial_columns`` best options (all the
        options of must-place jobs). After each solve, with row duals ``y``, the reduced
        cost of every allowed option is ``d = coef - A^T y``; options with ``d > 1e-7``
        are added and the LP re-solved until none is left, so the result is the optimum
        of the whole relaxation.

        Returns
        -------
        status, x, d, bound, hot
            HiGHS's status, the solution and reduced costs over all options, the LP
            optimum and whether the kept model was reused.
        """
        allowed = arr.col_upper > 0.5
        hot = bool(self.reuse and self._highs is not None and self._key == arr.structure_key)
        if hot:
            h, cols = self._highs, self._cols
            assert h is not None
            h.setOptionValue("time_limit", float(time_limit_s))
            idx = np.arange(cols.size, dtype=np.int32)
            h.changeColsCost(cols.size, idx, arr.coef[cols])
            h.changeColsBounds(cols.size, idx, np.zeros(cols.size), arr.col_upper[cols])
        else:
            cols = _initial_columns(arr, self.initial_columns)
            h = _new_highs(time_limit_s, self.threads)
            h.passModel(_lp(arr, integral=False, cols=cols))
        in_model = np.zeros(arr.n_cols, dtype=bool)
        in_model[cols] = True
        t0 = time.perf_counter()
        while True:
            h.setOptionValue("time_limit", max(float(time_limit_s) - (
                time.perf_counter() - t0), 0.01))
            h.run()
            status = h.getModelStatus()
            if status != highspy.HighsModelStatus.kOptimal:
                self._highs, self._key = None, None
                return status, np.zeros(0), np.zeros(0), math.nan, hot
            sol = h.getSolution()
            y = np.asarray(sol.row_dual, dtype=float)
            reduced = arr.coef - np.add.reduceat(arr.value * y[arr.index], arr.start[:-1])
            add = np.flatnonzero(allowed & ~in_model & (reduced > 1e-7))
            if add.size == 0:
                break
            add = add[np.argsort(-reduced[add], kind="stable")[:self.columns_per_round]]
            add.sort()
            sub = _columns(arr, add)
            h.addCols(add.size, arr.coef[add], np.zeros(add.size), arr.col_upper[add],
                      int(sub.index.size), sub.start[:-1], sub.index, sub.value)
            in_model[add] = True
            cols = np.concatenate([cols, add])
        x = np.zeros(arr.n_cols)
        x[cols] = np.asarray(sol.col_value, dtype=float)
        bound = float(h.getInfo().objective_function_value)
        if self.reuse:
            self._highs, self._key, self._cols = h, arr.structure_key, cols
        return status, x, reduced, bound, hot

    def _solve_lp_repair(self, prob: SlotProblem, arr: SlotArrays, mip_rel_gap: float,
                         time_limit_s: float, build_s: float
                         ) -> tuple[NDArray[np.bool_] | None, FastSolveReport]:
        """LP relaxation, greedy repair, then (``auto``) neighbourhood and full polish."""
        t0 = time.perf_counter()
        status, x, reduced, bound, hot = self._solve_lp(arr, time_limit_s)
        if status != highspy.HighsModelStatus.kOptimal:
            msg = f"LP relaxation {_status_name(status)}"
            solve_s = time.perf_counter() - t0
            if status == highspy.HighsModelStatus.kInfeasible:
                return None, FastSolveReport(self.method, "infeasible", build_s, solve_s, 0.0,
                                             None, None, None, message=msg)
            # Not infeasible, only unsolved: the MILP may still find an allocation.
            return self._solve_mip(prob, arr, mip_rel_gap,
                                   max(time_limit_s - solve_s, 1.0), build_s)
        t1 = time.perf_counter()
        choice, n_frac = repair(prob, arr, x)
        extract_s = time.perf_counter() - t1
        obj = None if choice is None else float(arr.coef[choice].sum())
        gap = None if obj is None else relative_gap(bound, obj)

        def report(st_gap: float | None, **kw: object) -> FastSolveReport:
            ok = st_gap is not None and st_gap <= mip_rel_gap
            base = FastSolveReport("lp-repair", "optimal" if ok else "feasible", build_s,
                                   time.perf_counter() - t0 - extract_s, extract_s, obj,
                                   bound, st_gap, n_fractional=n_frac, hot_start=hot)
            return replace(base, **kw)  # type: ignore[arg-type]

        if choice is not None and (self.method == "lp-repair" or (gap is not None
                                                                  and gap <= mip_rel_gap)):
            return choice, report(gap)
        # Neighbourhood polish: free the fractional jobs and the jobs with the smallest
        # LP regret (reduced cost of their best alternative); fix the rest as repaired.
        if choice is not None:
            nchoice = self._neighbourhood(prob, arr, x, reduced, choice,
                                          time_limit_s - (time.perf_counter() - t0))
            if nchoice is not None:
                nobj = float(arr.coef[nchoice].sum())
                if nobj > float(obj or -np.inf):
                    choice, obj, gap = nchoice, nobj, relative_gap(bound, nobj)
            if gap is not None and (gap <= max(mip_rel_gap, self.accept_gap)
                                    or arr.n_cols > self.full_mip_max_options):
                return choice, report(gap, method="auto", polished=True)
        left = time_limit_s - (time.perf_counter() - t0)
        if left <= 0.05 and choice is not None:
            return choice, report(gap, method="auto",
                                  message="no time left to polish the repair")
        mchoice, mrep = self._solve_mip(prob, arr, mip_rel_gap, max(left, 0.05), build_s,
                                        start=choice, bound=bound)
        if mchoice is None or (obj is not None and mrep.objective is not None
                               and mrep.objective < obj):
            if choice is None:
                return None, mrep
            return choice, report(gap, method="auto", polished=True,
                                  message=f"MILP polish did not improve ({mrep.status})")
        return mchoice, replace(mrep, solve_s=time.perf_counter() - t0 - extract_s
                                - mrep.extract_s,
                                extract_s=mrep.extract_s + extract_s, lp_bound=bound,
                                gap=relative_gap(bound, float(mrep.objective or 0.0)),
                                n_fractional=n_frac, hot_start=hot, polished=True,
                                method="auto")

    def _neighbourhood(self, prob: SlotProblem, arr: SlotArrays, x: NDArray[np.float64],
                       reduced: NDArray[np.float64], incumbent: NDArray[np.bool_],
                       time_left_s: float) -> NDArray[np.bool_] | None:
        """Re-solve exactly the jobs most likely to change, the others fixed.

        Free jobs: those fractional in the LP plus the ``max(neighbourhood, 2 % of jobs)``
        jobs with the smallest regret ``min_k |d_k|`` over their allowed options not in
        the incumbent (``d`` the LP reduced costs). The sub-problem keeps only their
        options, with the capacity the fixed jobs leave.
        """
        if time_left_s <= 0.05:
            return None
        n_j = len(prob.job_ids)
        allowed = arr.col_upper > 0.5
        rc = np.where(allowed & ~incumbent, np.abs(reduced), np.inf)
        regret = np.full(n_j, np.inf)
        np.minimum.at(regret, prob.job_index, rc)
        frac_opt = (x > _INT_TOL) & (x < 1.0 - _INT_TOL)
        free = np.bincount(prob.job_index, weights=frac_opt.astype(float), minlength=n_j) > 0
        n_free = min(n_j, max(self.neighbourhood, math.ceil(0.02 * n_j)))
        free[np.argsort(regret, kind="stable")[:n_free]] = True
        free &= np.isfinite(regret) | free
        sub_keep = free[prob.job_index] & allowed
        if not sub_keep.any():
            return None
        fixed = incumbent & ~free[prob.job_index]
        c = fixed.astype(float)
        moving = prob.link_index >= 0
        sub = replace(
            prob.subset(sub_keep),
            pool_capacity=prob.pool_capacity - np.rint(np.bincount(
                prob.pool_index, weights=c * prob.n_gpus,
                minlength=len(prob.pool_labels))).astype(np.int64),
            power_cap_kw=prob.power_cap_kw - np.bincount(
                prob.dc_index, weights=c * prob.power_kw, minlength=len(prob.dc_labels)),
            link_capacity_gb=prob.link_capacity_gb - np.bincount(
                prob.link_index[moving], weights=(c * prob.transfer_gb)[moving],
                minlength=len(prob.link_labels)),
        )
        sarr = build_arrays(sub)
        schoice, _ = self._solve_mip(sub, sarr, 1e-4, time_left_s, 0.0,
                                     start=incumbent[sub_keep])
        if schoice is None:
            return None
        full = fixed.copy()
        full[np.flatnonzero(sub_keep)[schoice]] = True
        return full if prob.is_feasible(full) else None

    def _solve_mip(self, prob: SlotProblem, arr: SlotArrays, mip_rel_gap: float,
                   time_limit_s: float, build_s: float,
                   start: NDArray[np.bool_] | None = None, bound: float | None = None,
                   ) -> tuple[NDArray[np.bool_] | None, FastSolveReport]:
        t0 = time.perf_counter()
        h = _new_highs(time_limit_s, self.threads)
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
        h.passModel(_lp(arr, integral=True))
        if start is not None:
            idx = np.arange(arr.n_cols, dtype=np.int32)
            h.setSolution(arr.n_cols, idx, start.astype(float))
        h.run()
        solve_s = time.perf_counter() - t0
        status = h.getModelStatus()
        info = h.getInfo()
        have = info.primal_solution_status == 2  # kSolutionStatusFeasible
        name = h.modelStatusToString(status)
        if not have:
            return None, FastSolveReport("mip", _status_name(status), build_s, solve_s, 0.0,
                                         None, bound, None, message=f"MILP {name}")
        t1 = time.perf_counter()
        x = np.asarray(h.getSolution().col_value, dtype=float)
        choice = (x > 0.5) & (arr.col_upper > 0.5)
        extract_s = time.perf_counter() - t1
        obj = float(arr.coef[choice].sum())
        if bound is None:
            gap = float(info.mip_gap) if math.isfinite(info.mip_gap) else None
        else:
            gap = relative_gap(bound, obj)
        st = "optimal" if status == highspy.HighsModelStatus.kOptimal else "feasible"
        return choice, FastSolveReport("mip", st, build_s, solve_s, extract_s, obj, bound, gap,
                                       message="" if st == "optimal" else f"MILP {name}")

    def _warm_start(self, prob: SlotProblem, arr: SlotArrays) -> NDArray[np.bool_] | None:
        """The previous allocation mapped onto this slot's options (if still feasible)."""
        if not self._prev:
            return None
        keys = _option_keys(prob)
        start = np.array([k in self._prev for k in keys], dtype=bool) & (arr.col_upper > 0.5)
        # One option per job at most, and only if the whole start is feasible.
        if not start.any() or not prob.is_feasible(start):
            return None
        return start


def _status_name(status: highspy.HighsModelStatus) -> str:
    if status == highspy.HighsModelStatus.kInfeasible:
        return "infeasible"
    if status == highspy.HighsModelStatus.kTimeLimit:
        return "maxTimeLimit"
    # The enum's own name: a throw-away Highs() would print HiGHS's banner.
    return str(status.name).removeprefix("k")


def _option_keys(prob: SlotProblem) -> list[tuple[str, str, int]]:
    return [(prob.job_ids[j], prob.pool_labels[p], int(n)) for j, p, n in
            zip(prob.job_index.tolist(), prob.pool_index.tolist(), prob.n_gpus.tolist(),
                strict=True)]


def _keys(prob: SlotProblem, choice: NDArray[np.bool_]) -> set[tuple[str, str, int]]:
    keys = _option_keys(prob)
    return {keys[k] for k in np.flatnonzero(choice).tolist()}


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
    keeps its state between slots) or the Pyomo reference model; when that fails or times
    out, the greedy feasible allocation (:func:`workbench.policies.greedy.greedy_choice`,
    ``priority`` per job), reported as a fallback in the returned :class:`SolveInfo`.
    """
    rows = np.flatnonzero(keep)
    sub = prob.subset(keep)
    t0 = time.perf_counter()
    chosen: NDArray[np.int64] | None
    if solver == "fast":
        full, info = fast(prob, keep=keep, mip_rel_gap=mip_rel_gap, time_limit_s=time_limit_s,
                          extra_constraints=extra_constraints)
        chosen = None if full is None else np.flatnonzero(full)
    else:
        choice, info = solve_slot_problem(sub, mip_rel_gap=mip_rel_gap,
                                          time_limit_s=time_limit_s,
                                          extra_constraints=extra_constraints)
        chosen = None if choice is None else rows[choice]
    if chosen is None:
        msg = (f"slot {t}: MILP {info.status} ({info.message}); "
               f"using the greedy feasible allocation")
        log.debug(msg)  # the simulator reports fallbacks (SolveInfo.fallback)
        chosen = rows[greedy_choice(sub, priority=priority)]
        info = SolveInfo(status=info.status, solve_s=time.perf_counter() - t0,
                         fallback=True, message=msg)
    return chosen, info


def solve_slot_problem_fast(
    prob: SlotProblem,
    *,
    method: Method = "auto",
    mip_rel_gap: float = 1e-3,
    time_limit_s: float = 10.0,
    extra_constraints: ExtraConstraints | None = None,
) -> tuple[NDArray[np.bool_] | None, SolveInfo]:
    """One-shot fast solve (no state kept); same contract as ``milp.solve_slot_problem``."""
    solver = FastSlotSolver(method=method, reuse=False)
    return solver(prob, mip_rel_gap=mip_rel_gap, time_limit_s=time_limit_s,
                  extra_constraints=extra_constraints)


def lp_bound(prob: SlotProblem) -> float:
    """Optimum of the LP relaxation: an upper bound on the slot MILP's optimum.

    Raises
    ------
    RuntimeError
        When HiGHS does not prove the LP optimal (e.g. infeasible).
    """
    arr = build_arrays(prob)
    h = _new_highs(600.0, None)
    h.passModel(_lp(arr, integral=False))
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"LP relaxation not solved: {h.modelStatusToString(status)}")
    return float(h.getInfo().objective_function_value)


def synthetic_slot_problem(
    n_jobs: int,
    n_dcs: int,
    n_configs: int,
    *,
    seed: int = 0,
    inference_share: float = 0.05,
    moved_share: float = 0.7,
    load: float = 1.6,
    V: float = 20.0,
) -> SlotProblem:
    """A random slot problem shaped like the Lyapunov scheduler's (for tests and benchmarks).

    ``n_jobs`` jobs, each with ``n_dcs * n_configs`` options (training) or the options in
    about a third of the datacenters (inference, within a latency bound). Configurations
    alternate two GPU types per datacenter with counts 1, 2, 4, 8. Weights follow the
    NetCoef shape ``(V + Q_j) p / pref - V c / (kappa_j pref)`` with sublinear progress
    ``p ~ speed_g n^0.8``, cost ``c ~ price_d P_g n`` and random backlog ``Q_j``; about a
    fifth of the options are negative. Pool capacities are set so that the best choices
    ask for ``load`` times the GPUs there are; half of the datacenters have a binding power
    cap; ``moved_share`` of the jobs last ran elsewhere, so their options there move a
    checkpoint over a link whose volume binds.
    """
    if min(n_jobs, n_dcs, n_configs) < 1:
        raise ValueError("n_jobs, n_dcs and n_configs must be >= 1")
    rng = np.random.default_rng(seed)
    n_types = 2
    counts_menu = np.array([1, 2, 4, 8])
    cfg_type = np.arange(n_configs) % n_types
    cfg_n = counts_menu[(np.arange(n_configs) // n_types) % counts_menu.size]
    speed = np.array([1.0, 0.6])
    power_kw = np.array([0.7, 0.4])  # per GPU, facility
    price = rng.uniform(0.3, 1.2, n_dcs)
    inference = rng.random(n_jobs) < inference_share
    last_dc = np.where(rng.random(n_jobs) < moved_share, rng.integers(0, n_dcs, n_jobs), -1)
    q = rng.exponential(0.5 * V, n_jobs)
    kappa = rng.uniform(0.5, 1.5, n_jobs) * float(np.mean(price) * power_kw.mean())
    ckpt = rng.uniform(1.0, 40.0, n_jobs)
    work = rng.uniform(0.5, 2.0, n_jobs)

    mesh = np.meshgrid(np.arange(n_jobs), np.arange(n_dcs), np.arange(n_configs),
                       indexing="ij")
    jj, dd, cc = (a.ravel() for a in mesh)
    home = rng.integers(0, n_dcs, n_jobs)
    near = (dd - home[jj]) % n_dcs < max(1, math.ceil(n_dcs / 3))
    ok = ~inference[jj] | (near & (cfg_n[cc] == 1))
    jj, dd, cc = jj[ok], dd[ok], cc[ok]
    g = cfg_type[cc]
    n = cfg_n[cc]
    jitter = rng.lognormal(0.0, 0.1, jj.size)
    prog = speed[g] * n ** 0.8 / work[jj] * jitter
    pref = np.zeros(n_jobs)
    np.maximum.at(pref, jj, prog)
    cost = price[dd] * power_kw[g] * n * jitter
    moves = (last_dc[jj] >= 0) & (last_dc[jj] != dd)
    prog = np.where(moves, prog * 0.9, prog)
    coef = ((V + q[jj]) * prog - V * cost / kappa[jj]) / pref[jj]
    coef = np.where(inference[jj], -V * cost / np.mean(cost), coef)

    pools = n_dcs * n_types
    pool_index = dd * n_types + g
    best = np.full(n_jobs, -np.inf)
    np.maximum.at(best, jj, coef)
    is_best = coef == best[jj]
    want = np.bincount(pool_index[is_best], weights=n[is_best], minlength=pools)
    capacity = np.maximum(np.round(want.sum() / pools / load), 8).astype(np.int64)
    capacity = np.maximum(capacity + rng.integers(-2, 3, pools), 1)
    dc_power_want = np.bincount(dd[is_best], weights=(power_kw[g] * n)[is_best],
                                minlength=n_dcs)
    power_cap = np.full(n_dcs, np.inf)
    capped = rng.random(n_dcs) < 0.5
    power_cap[capped] = np.maximum(0.5 * dc_power_want[capped], 5.0)

    links = [(a, b) for a in range(n_dcs) for b in range(a + 1, n_dcs)]
    link_pos = {pair: i for i, pair in enumerate(links)}
    link_index = np.full(jj.size, -1, dtype=np.int64)
    mv = np.flatnonzero(moves)
    src, dst = last_dc[jj[mv]], dd[mv]
    link_index[mv] = [link_pos[(min(a, b), max(a, b))] for a, b in
                      zip(src.tolist(), dst.tolist(), strict=True)]
    transfer_gb = np.where(moves, ckpt[jj], 0.0)
    link_cap = np.full(len(links), max(200.0, 0.6 * n_jobs / max(len(links), 1) * 20.0))
    return SlotProblem(
        job_ids=tuple(f"j{i}" for i in range(n_jobs)),
        job_index=jj.astype(np.int64),
        coef=coef.astype(float),
        must_place=inference,
        pool_labels=tuple(f"dc{d}/g{t}" for d in range(n_dcs) for t in range(n_types)),
        pool_index=pool_index.astype(np.int64),
        n_gpus=n.astype(np.int64),
        pool_capacity=capacity,
        dc_labels=tuple(f"dc{d}" for d in range(n_dcs)),
        dc_index=dd.astype(np.int64),
        power_kw=(power_kw[g] * n).astype(float),
        power_cap_kw=power_cap,
        link_labels=tuple(f"dc{a}<->dc{b}" for a, b in links),
        link_index=link_index,
        transfer_gb=transfer_gb.astype(float),
        link_capacity_gb=link_cap,
    )


def perturbed(prob: SlotProblem, seed: int, sigma: float = 0.05) -> SlotProblem:
    """The next slot of a steady period: the same options, weights moved by ~``sigma``."""
    rng = np.random.default_rng(seed)
    scale = np.abs(prob.coef).mean() if prob.n_options else 1.0
    coef = prob.coef + sigma * scale * rng.standard_normal(prob.n_options)
    return replace(prob, coef=coef)


__all__ = [
    "METHODS",
    "FastSlotSolver",
    "FastSolveReport",
    "SlotArrays",
    "build_arrays",
    "lp_bound",
    "perturbed",
    "relative_gap",
    "repair",
    "solve_or_greedy",
    "solve_slot_problem_fast",
    "synthetic_slot_problem",
]
