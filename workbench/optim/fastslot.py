"""The fast path of the per-slot assignment MILP: successive slots solved as HiGHS arrays.

:mod:`workbench.optim.slotpyomo` is the readable Pyomo formulation. The fast path
solves the *same* model (:mod:`workbench.optim.slotarrays`: the matrix, its LP bound, the
repair; the maths there) and offers three ways to solve it:

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

:class:`FastSlotSolver` keeps its HiGHS object between slots: when the next slot's problem
has the same structure (same options, rows and coefficients of the matrix), only the
objective and the column bounds change and the LP restarts from the previous basis.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Literal

import highspy
import numpy as np
from numpy.typing import NDArray

from workbench.optim.highs import new_highs, solve, termination_name
from workbench.optim.info import SolveInfo
from workbench.optim.slot import ExtraConstraints, SlotProblem
from workbench.optim.slotarrays import (
    INT_TOL,
    SlotArrays,
    build_arrays,
    columns_of,
    initial_columns,
    relative_gap,
    repair,
    slot_lp,
)

Method = Literal["auto", "lp-repair", "mip"]
METHODS: tuple[str, ...] = ("auto", "lp-repair", "mip")
"""Every ``method`` :class:`FastSlotSolver` accepts."""


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


@dataclass
class FastSlotSolver:
    """Solve successive slot problems fast; a drop-in for
    :func:`~workbench.optim.slotpyomo.solve_slot_problem`.

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
        """Solve one slot; same contract as
        :func:`workbench.optim.slotpyomo.solve_slot_problem`.

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
            # The hook acts on the Pyomo model: only then is Pyomo imported.
            from workbench.optim.slotpyomo import solve_slot_problem

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
            cols = initial_columns(arr, self.initial_columns)
            h = new_highs(time_limit_s=time_limit_s, threads=self.threads)
            h.passModel(slot_lp(arr, integral=False, cols=cols))
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
                if hot and status == highspy.HighsModelStatus.kInfeasible:
                    # The kept columns may lack every allowed option of a must-place job
                    # (its allowed set changed): start cold, with all of them.
                    return self._solve_lp(arr, time_limit_s)
                return status, np.zeros(0), np.zeros(0), math.nan, hot
            sol = h.getSolution()
            y = np.asarray(sol.row_dual, dtype=float)
            reduced = arr.coef - np.add.reduceat(arr.value * y[arr.index], arr.start[:-1])
            add = np.flatnonzero(allowed & ~in_model & (reduced > 1e-7))
            if add.size == 0:
                break
            add = add[np.argsort(-reduced[add], kind="stable")[:self.columns_per_round]]
            add.sort()
            sub = columns_of(arr, add)
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
            msg = f"LP relaxation {termination_name(status)}"
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
        frac_opt = (x > INT_TOL) & (x < 1.0 - INT_TOL)
        free = np.bincount(prob.job_index, weights=frac_opt.astype(float), minlength=n_j) > 0
        n_free = min(n_j, max(self.neighbourhood, math.ceil(0.02 * n_j)))
        free[np.argsort(regret, kind="stable")[:n_free]] = True
        free &= np.isfinite(regret) | free
        sub_keep = free[prob.job_index] & allowed
        if not sub_keep.any():
            return None
        fixed = incumbent & ~free[prob.job_index]
        sub = prob.with_room_left(fixed).subset(sub_keep)
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
        h = new_highs(time_limit_s=time_limit_s, threads=self.threads, mip_rel_gap=mip_rel_gap)
        res = solve(h, slot_lp(arr, integral=True),
                    start=None if start is None else start.astype(float))
        solve_s = time.perf_counter() - t0
        if not res.has_solution:
            return None, FastSolveReport("mip", termination_name(res.model_status), build_s,
                                         solve_s, 0.0, None, bound, None,
                                         message=f"MILP {res.status}")
        t1 = time.perf_counter()
        choice = (res.x > 0.5) & (arr.col_upper > 0.5)
        extract_s = time.perf_counter() - t1
        obj = float(arr.coef[choice].sum())
        if bound is None:
            gap = res.mip_gap if math.isfinite(res.mip_gap) else None
        else:
            gap = relative_gap(bound, obj)
        st = "optimal" if res.optimal else "feasible"
        return choice, FastSolveReport("mip", st, build_s, solve_s, extract_s, obj, bound, gap,
                                       message="" if st == "optimal" else f"MILP {res.status}")

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


def _option_keys(prob: SlotProblem) -> list[tuple[str, str, int]]:
    return [(prob.job_ids[j], prob.pool_labels[p], int(n)) for j, p, n in
            zip(prob.job_index.tolist(), prob.pool_index.tolist(), prob.n_gpus.tolist(),
                strict=True)]


def _keys(prob: SlotProblem, choice: NDArray[np.bool_]) -> set[tuple[str, str, int]]:
    keys = _option_keys(prob)
    return {keys[k] for k in np.flatnonzero(choice).tolist()}


def solve_slot_problem_fast(
    prob: SlotProblem,
    *,
    method: Method = "auto",
    mip_rel_gap: float = 1e-3,
    time_limit_s: float = 10.0,
    extra_constraints: ExtraConstraints | None = None,
) -> tuple[NDArray[np.bool_] | None, SolveInfo]:
    """One-shot fast solve (no state kept); same contract as
    ``slotpyomo.solve_slot_problem``."""
    solver = FastSlotSolver(method=method, reuse=False)
    return solver(prob, mip_rel_gap=mip_rel_gap, time_limit_s=time_limit_s,
                  extra_constraints=extra_constraints)


__all__ = [
    "METHODS",
    "FastSlotSolver",
    "FastSolveReport",
    "solve_slot_problem_fast",
]
