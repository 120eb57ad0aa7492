"""The slot MILP as HiGHS arrays: the model, its LP bound and the repair of an LP solution.

:func:`build_arrays` builds the *same* model as the Pyomo one
(:mod:`workbench.optim.slotpyomo`) from the same :class:`~workbench.optim.slot.SlotProblem`
arrays, as a sparse column-wise matrix for HiGHS (:func:`slot_lp`), from the row families
:meth:`~workbench.optim.slot.SlotProblem.rows` defines once; the fast path
(:mod:`workbench.optim.fastslot`) solves it.

Maths (identical to the reference; binaries ``z[k]``, option ``k`` of job ``j(k)``)::

    max   sum_k coef[k] * z[k]
    s.t.  sum_{k in K_j} z[k] <= 1          training job j
          sum_{k in K_j} z[k]  = 1          inference job j (must place)
          sum_{k in K_p} n[k] z[k] <= C[p]   pool p        (only when it can bind)
          sum_{k in K_d} P[k] z[k]
            + sum_{k in M_d} Ps[k] z[k] <= Pcap[d] datacenter d (finite caps only)
          sum_{k in K_l} gb[k] z[k] <= B[l]  link l         (only when it can bind)
          sum_{k in K_s} e[k] z[k] <= H[s]   supply row s   (only when it can bind)

Why the relaxation is nearly integral: the one-choice rows form a GUB structure; a basic
optimal LP solution has at most as many fractional jobs as there are binding coupling rows
(pools, power caps, links), a few dozen against hundreds or thousands of jobs. The LP
optimum bounds the MILP from above (:func:`lp_bound`); :func:`repair` rounds an LP solution
to a feasible choice, whose gap to that bound is certified (:func:`relative_gap`).

Exact reduction: every constraint row has non-negative coefficients and every coupling row
is ``<=``, so an option of a training job with ``coef <= 0`` can be set to zero without
losing optimality; such columns get the upper bound 0.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import highspy
import numpy as np
from numpy.typing import NDArray

from workbench.optim.highs import highs_lp, new_highs, solve
from workbench.optim.slot import SlotProblem, stack_rows

INT_TOL = 1e-6
"""An LP value at least ``1 - INT_TOL`` counts as 1 (the option is kept by the repair)."""


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
    row_of : dict label -> int array
        Per row family (:meth:`~workbench.optim.slot.SlotProblem.rows`), the matrix row of
        each of its rows, ``-1`` where it has none (cannot bind). The first rows are the
        one-choice rows, one per job that has options.
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
    row_of: dict[str, NDArray[np.int64]]
    structure_key: str

    @property
    def n_cols(self) -> int:
        return int(self.coef.size)

    @property
    def n_rows(self) -> int:
        return int(self.row_lower.size)

    @property
    def n_job_rows(self) -> int:
        """The one-choice rows (the first rows)."""
        return int(np.count_nonzero(self.row_of["one_choice"] >= 0))


def build_arrays(prob: SlotProblem, keep: NDArray[np.bool_] | None = None) -> SlotArrays:
    """Build the slot MILP of ``prob`` as sparse arrays: one column ``z[k]`` per option,
    weight ``coef[k]`` (maximised), bound 1 (0 when reduced away or not kept); rows::

        sum_{k in K_j} z[k] <= 1   (>= 1 too for a must-place job)   job j with options
        sum_{k in K_p} n[k] z[k] <= C[p]       pool p whose options ask for more than C[p]
        sum_{k in K_d} P[k] z[k]
          + sum_{k in M_d} Ps[k] z[k] <= Pcap[d]  datacenter d with entries and a finite cap
        sum_{k in K_l} gb[k] z[k] <= B[l]      link l whose options could move more than B[l]
        sum_{k in K_s} e[k] z[k] <= H[s]       supply row s whose options could draw more

    Parameters
    ----------
    prob : SlotProblem
        The same arrays the Pyomo reference is built from.
    keep : bool array (K,), optional
        Options allowed in this slot (others get upper bound 0); the default keeps all.
        Passing a mask instead of ``prob.subset(keep)`` keeps the structure from slot to
        slot, so that :class:`~workbench.optim.fastslot.FastSlotSolver` can restart from
        the previous basis.
    """
    n_k = prob.n_options
    coef = np.asarray(prob.coef, dtype=float)
    upper = np.ones(n_k)
    if keep is not None:
        if keep.shape != (n_k,):
            raise ValueError(f"keep must have shape ({n_k},) like the options")
        upper[~keep] = 0.0
    # Exact reduction: a non-positive option of a job that may pause is never needed.
    upper[(coef <= 0) & ~prob.must_place[prob.job_index]] = 0.0

    families = prob.rows()
    st = stack_rows(families, [fam.built() for fam in families])
    present = st.index >= 0
    counts = present.sum(axis=1)
    start = np.zeros(n_k + 1, dtype=np.int32)
    np.cumsum(counts, out=start[1:])
    index = st.index[present].astype(np.int32)
    value = st.value[present]
    digest = hashlib.blake2b(digest_size=16)
    for arr in (start, index, value, st.lower, st.upper):
        digest.update(np.ascontiguousarray(arr).tobytes())
    return SlotArrays(
        coef=coef, col_upper=upper, start=start, index=index, value=value,
        row_lower=st.lower, row_upper=st.upper, row_of=st.row_of,
        structure_key=digest.hexdigest(),
    )


def columns_of(arr: SlotArrays, cols: NDArray[np.int64]) -> SlotArrays:
    """The CSC arrays restricted to columns ``cols`` (rows unchanged)."""
    counts = np.diff(arr.start)[cols]
    start = np.zeros(cols.size + 1, dtype=np.int32)
    np.cumsum(counts, out=start[1:])
    take = np.repeat(arr.start[cols], counts) + (
        np.arange(int(start[-1])) - np.repeat(start[:-1], counts))
    return replace(arr, coef=arr.coef[cols], col_upper=arr.col_upper[cols], start=start,
                   index=arr.index[take], value=arr.value[take])


def initial_columns(arr: SlotArrays, per_job: int) -> NDArray[np.int64]:
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


def slot_lp(arr: SlotArrays, integral: bool,
            cols: NDArray[np.int64] | None = None) -> highspy.HighsLp:
    """The slot MILP (``integral``) or its LP relaxation as HiGHS's model (maximised),
    restricted to the options ``cols`` when given."""
    if cols is not None:
        arr = columns_of(arr, cols)
    return highs_lp(arr.coef, arr.col_upper, arr.row_lower, arr.row_upper, arr.start,
                    arr.index, arr.value,
                    integral=np.ones(arr.n_cols, dtype=bool) if integral else None,
                    maximize=True)


def repair(prob: SlotProblem, arr: SlotArrays, x: NDArray[np.float64]
           ) -> tuple[NDArray[np.bool_] | None, int]:
    """Round an LP solution to a feasible 0/1 choice.

    Keeps every option with ``x >= 1 - 1e-6``; then places, job by job (must-place jobs
    first, then by largest weight), the jobs left fractional or unplaced on their best
    option that fits in every row's residual capacity (:meth:`SlotProblem.rows`). Weights
    ``<= 0`` are only taken for must-place jobs.

    Returns
    -------
    choice : bool array (K,) or None
        None when a must-place job fits nowhere (the caller then solves the MILP).
    n_fractional : int
        Jobs whose LP choice was fractional.
    """
    allowed = arr.col_upper > 0.5
    chosen = (x >= 1.0 - INT_TOL) & allowed
    n_j = len(prob.job_ids)
    mass = np.bincount(prob.job_index, weights=np.clip(x, 0.0, 1.0), minlength=n_j)
    placed = np.bincount(prob.job_index[chosen], minlength=n_j) > 0
    n_frac = int(np.sum((mass > INT_TOL) & ~placed))

    st = stack_rows(prob.rows())
    left = st.upper - st.used(chosen)

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
    for jpos in job_order.tolist():
        ks = rows[bounds[jpos]:bounds[jpos + 1]]
        hit = np.flatnonzero(st.fits(left, ks, 1e-9))
        if hit.size == 0:
            if prob.must_place[jobs[jpos]]:
                return None, n_frac
            continue
        k = int(ks[hit[0]])
        chosen[k] = True
        st.draw(left, k)
    return chosen, n_frac


def relative_gap(bound: float, objective: float) -> float:
    """``max(bound - objective, 0) / max(|bound|, 1e-9)`` for a maximisation."""
    return max(bound - objective, 0.0) / max(abs(bound), 1e-9)


def lp_bound(prob: SlotProblem) -> float:
    """Optimum of the LP relaxation: an upper bound on the slot MILP's optimum.

    Raises
    ------
    RuntimeError
        When HiGHS does not prove the LP optimal (e.g. infeasible).
    """
    res = solve(new_highs(time_limit_s=600.0), slot_lp(build_arrays(prob), integral=False))
    if not res.optimal:
        raise RuntimeError(f"LP relaxation not solved: {res.status}")
    return res.objective
