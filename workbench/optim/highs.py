"""The one HiGHS adapter: a quiet ``Highs``, a sparse model built in named blocks, a read result.

Every array model of the workbench reaches HiGHS through here: the slot MILP's fast path
(:mod:`workbench.optim.fastslot`) and the block LP (:mod:`workbench.optim.blocklp`). (The
Pyomo model, :mod:`workbench.optim.slotpyomo`, goes through the solver Pyomo is given.)

A model is::

    min (or max)  c^T x    s.t.   row_lower <= A x <= row_upper,   col_lower <= x <= col_upper

with ``A`` column-wise sparse and some columns integral. :class:`SparseLp` collects it in
named column groups and row blocks whose entries carry labels (:class:`Coords`: job, pool,
block, ...), so that entries are addressed, and the solution read back, by label rather than
by index arithmetic; :func:`highs_lp` turns arrays into HiGHS's model; :func:`solve` runs it
and returns a :class:`HighsResult` whose status the caller must check.

HiGHS prints its banner to the process's standard output (at the C level) the first time a
``Highs`` object is made, whatever ``output_flag`` says afterwards. That would corrupt the
CLI's ``--json`` output, so the first construction runs with file descriptor 1 pointed at
``/dev/null``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import highspy
import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

_lock = threading.Lock()
_bannered = False

_FEASIBLE = 2
"""``info.primal_solution_status`` of a feasible primal solution (kSolutionStatusFeasible)."""


def new_highs(*, time_limit_s: float | None = None, mip_rel_gap: float | None = None,
              threads: int | None = None, presolve: bool | None = None) -> highspy.Highs:
    """A ``Highs`` object with its log switched off, no banner on stdout, and the options
    given (an option left None keeps HiGHS's default; ``presolve`` False switches HiGHS's
    presolve off)."""
    global _bannered
    with _lock:
        if _bannered:
            h = highspy.Highs()
        else:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
            _bannered = True
    h.setOptionValue("output_flag", False)
    if time_limit_s is not None:
        h.setOptionValue("time_limit", float(time_limit_s))
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    if mip_rel_gap is not None:
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    if presolve is not None:
        h.setOptionValue("presolve", "on" if presolve else "off")
    return h


def highs_lp(
    cost: NDArray[np.float64],
    col_upper: NDArray[np.float64],
    row_lower: NDArray[np.float64],
    row_upper: NDArray[np.float64],
    start: NDArray[np.int32],
    index: NDArray[np.int32],
    value: NDArray[np.float64],
    *,
    col_lower: NDArray[np.float64] | None = None,
    integral: NDArray[np.bool_] | None = None,
    maximize: bool = False,
) -> highspy.HighsLp:
    """HiGHS's model of ``min (max) cost x`` from column-wise sparse arrays.

    ``start, index, value`` hold ``A`` by column (entries of column ``k`` are
    ``index[start[k]:start[k+1]]``); ``inf`` bounds are open; ``col_lower`` defaults to 0;
    ``integral`` marks the integer columns (none when None or all False).
    """
    n_cols, n_rows = int(cost.size), int(row_lower.size)
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    if maximize:
        lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(n_cols) if col_lower is None else col_lower
    lp.col_upper_ = col_upper
    lp.row_lower_ = row_lower
    lp.row_upper_ = row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    lp.a_matrix_.num_col_ = n_cols
    lp.a_matrix_.num_row_ = n_rows
    if integral is not None and integral.any():
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else
                           highspy.HighsVarType.kContinuous for i in integral.tolist()]
    return lp


Label = NDArray[np.int64] | int
"""One label per entry of a dimension (or one for all entries)."""


class Coords:
    """The labels of a column group's or row block's entries, by named dimension.

    Each dimension has a size (its labels are ``0 .. size - 1``); each entry has one label
    of every dimension. Either the full grid (every combination once, in C order: the last
    dimension varies fastest, so ``Coords.grid(pool=P, block=B)`` puts pool ``p``, block
    ``b`` at ``p * B + b``) or the entries as given (a column group in its own order, which
    may repeat a combination; a row block's :meth:`unique` combinations, sorted). Labels
    are flattened to one key per entry here (``np.ravel_multi_index``), and nowhere else.

    Parameters
    ----------
    sizes : dict of str to int
        The dimensions in order, with their sizes.
    labels : dict of str to int array, optional
        Each entry's label per dimension (arrays of one length); None: the full grid.
    """

    def __init__(self, sizes: dict[str, int],
                 labels: dict[str, NDArray[np.int64]] | None = None) -> None:
        self.sizes = {d: int(n) for d, n in sizes.items()}
        self.labels = (None if labels is None else
                       {d: np.asarray(labels[d], dtype=np.int64) for d in self._dims(labels)})
        # The entries' keys sorted, and their positions: built by the first lookup.
        self._sorted: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None

    @classmethod
    def grid(cls, **sizes: int) -> Coords:
        """Every label combination of ``sizes`` once, in C order."""
        return cls(sizes)

    @classmethod
    def of(cls, **labels: NDArray[np.int64]) -> Coords:
        """The entries with these labels, in this order; each dimension's size one above
        its largest label."""
        return cls({d: int(np.max(v, initial=-1)) + 1 for d, v in labels.items()}, labels)

    @classmethod
    def unique(cls, **labels: NDArray[np.int64]) -> Coords:
        """The distinct label combinations among the entries given, sorted (by the first
        dimension, then the next, ...)."""
        c = cls.of(**labels)
        keys = np.unique(c._flat(labels)[0])
        if not keys.size:
            return cls(c.sizes, {d: np.zeros(0, dtype=np.int64) for d in c.sizes})
        return cls(c.sizes, dict(zip(c.sizes, np.unravel_index(keys, c.shape), strict=True)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.sizes.values())

    @property
    def size(self) -> int:
        if self.labels is None:
            return int(np.prod(self.shape, dtype=np.int64))
        return int(next(iter(self.labels.values())).size) if self.labels else 0

    def label(self, dim: str) -> NDArray[np.int64]:
        """Each entry's label of dimension ``dim``."""
        if self.labels is not None:
            return self.labels[dim]
        return np.indices(self.shape, dtype=np.int64)[list(self.sizes).index(dim)].reshape(-1)

    def locate(self, **labels: Label) -> NDArray[np.int64]:
        """The position of the entry with each set of labels given (-1 where there is none;
        of several, the first)."""
        key, ok = self._flat(labels)
        if self.labels is None:
            return np.where(ok, key, -1)
        if self._sorted is None:
            own = self._flat(self.labels)[0]
            order = np.argsort(own, kind="stable")
            self._sorted = (own[order], order)
        keys, order = self._sorted
        if not keys.size:
            return np.full(key.size, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(keys, key), keys.size - 1)
        return np.where(ok & (keys[pos] == key), order[pos], -1)

    def _dims(self, labels: Mapping[str, Label]) -> list[str]:
        if set(labels) != set(self.sizes):
            raise ValueError(f"labels {sorted(labels)} given for dimensions "
                             f"{list(self.sizes)}")
        return list(self.sizes)

    def _flat(self, labels: Mapping[str, Label]) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        """One key per entry (C order over the dimensions) and whether its labels lie in
        their dimensions."""
        idx = np.broadcast_arrays(*(np.asarray(labels[d], dtype=np.int64)
                                    for d in self._dims(labels)))
        if not idx:
            raise ValueError("labels need at least one dimension")
        ok = np.ones(idx[0].shape, dtype=bool)
        for i, n in zip(idx, self.shape, strict=True):
            ok &= (i >= 0) & (i < n)
        if not ok.any():
            return np.zeros(ok.size, dtype=np.int64), ok.reshape(-1)
        key = np.ravel_multi_index(tuple(idx), self.shape, mode="clip")
        return np.asarray(key, dtype=np.int64).reshape(-1), ok.reshape(-1)


@dataclass
class SparseLp:
    """A sparse LP or MILP in the making: named groups of columns, then named blocks of rows,
    each entry labelled (:class:`Coords`).

    Columns carry their objective weight, upper bound (lower bound 0) and integrality; a
    row block its rows' labels and bounds, and its entries ``(row, col, value)`` with each
    entry's row given by its labels (:meth:`add_rows`): a model is written by what its rows
    are (job, pool, block, ...), not by where they lie. :meth:`col` finds columns by their
    labels, :meth:`col_values` and :meth:`row_values` read a solution or duals back shaped
    by the dimensions. :meth:`highs_lp` stacks the blocks in the order they were added.
    """

    maximize: bool = False
    cols: dict[str, slice] = field(default_factory=dict)
    rows: dict[str, slice] = field(default_factory=dict)
    col_coords: dict[str, Coords] = field(default_factory=dict)
    row_coords: dict[str, Coords] = field(default_factory=dict)
    _cost: list[NDArray[np.float64]] = field(default_factory=list, repr=False)
    _upper: list[NDArray[np.float64]] = field(default_factory=list, repr=False)
    _integral: list[NDArray[np.bool_]] = field(default_factory=list, repr=False)
    _r: list[NDArray[np.int64]] = field(default_factory=list, repr=False)
    _c: list[NDArray[np.int64]] = field(default_factory=list, repr=False)
    _v: list[NDArray[np.float64]] = field(default_factory=list, repr=False)
    _lower_r: list[NDArray[np.float64]] = field(default_factory=list, repr=False)
    _upper_r: list[NDArray[np.float64]] = field(default_factory=list, repr=False)
    n_cols: int = 0
    n_rows: int = 0

    def add_columns(self, name: str, upper: NDArray[np.float64], *, integral: bool = False,
                    coords: Coords | None = None) -> slice:
        """Append ``upper.size`` columns labelled ``coords`` (default: one dimension
        ``entry``), weight 0 until :meth:`set_cost`; their slice."""
        n = int(upper.size)
        coords = Coords.grid(entry=n) if coords is None else coords
        if coords.size != n:
            raise ValueError(f"column group {name}: {n} bounds for {coords.size} labels")
        got = self.cols[name] = slice(self.n_cols, self.n_cols + n)
        self.col_coords[name] = coords
        self._cost.append(np.zeros(n))
        self._upper.append(np.asarray(upper, dtype=float))
        self._integral.append(np.full(n, integral))
        self.n_cols += n
        return got

    def set_cost(self, name: str, cost: NDArray[np.float64] | float) -> None:
        """The objective weight of column group ``name`` (an array, or one number for all)."""
        i = list(self.cols).index(name)
        self._cost[i] = np.broadcast_to(np.asarray(cost, dtype=float),
                                        self._cost[i].shape).copy()

    def col(self, name: str, /, **labels: Label) -> NDArray[np.int64]:
        """The columns of group ``name`` with these labels (one per entry, absolute).

        Raises
        ------
        KeyError
            When the group has no column with some entry's labels.
        """
        pos = self.col_coords[name].locate(**labels)
        if (pos < 0).any():
            raise KeyError(f"column group {name} has no column with some of these labels")
        return self.cols[name].start + pos

    def add_rows(self, name: str, coords: Coords, col: NDArray[np.int64],
                 value: NDArray[np.float64], lower: ArrayLike, upper: ArrayLike, /,
                 **labels: Label) -> slice:
        """Append one row per entry of ``coords`` (bounds ``lower``, ``upper``: one per row,
        or one number for all) with entries ``A[row, col] = value``, each entry's row the
        one with its ``labels`` (``col`` absolute); their slice.

        Raises
        ------
        ValueError
            When an entry's labels name no row of the block.
        """
        n = coords.size
        row = coords.locate(**labels)
        if (row < 0).any():
            raise ValueError(f"row block {name}: entries labelled outside its rows")
        got = self.rows[name] = slice(self.n_rows, self.n_rows + n)
        self.row_coords[name] = coords
        self._r.append(np.broadcast_to(row, np.shape(value)) + self.n_rows)
        self._c.append(np.asarray(col, dtype=np.int64))
        self._v.append(np.asarray(value, dtype=float))
        self._lower_r.append(np.broadcast_to(np.asarray(lower, dtype=float), (n,)))
        self._upper_r.append(np.broadcast_to(np.asarray(upper, dtype=float), (n,)))
        self.n_rows += n
        return got

    def col_values(self, name: str, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """Group ``name``'s part of a solution ``x`` (all columns): shaped by its dimensions
        when it is a full grid, else one value per column in its order."""
        return _shaped(self.col_coords[name], x[self.cols[name]])

    def row_values(self, name: str, y: NDArray[np.float64]) -> NDArray[np.float64]:
        """Block ``name``'s part of row values or duals ``y`` (all rows), shaped as
        :meth:`col_values`."""
        return _shaped(self.row_coords[name], y[self.rows[name]])

    def matrix(self) -> sp.csc_matrix:
        """``A`` column-wise, canonical (indices sorted, no duplicates)."""
        if not self._v:
            return sp.csc_matrix((self.n_rows, self.n_cols))
        coo = sp.coo_matrix((np.concatenate(self._v),
                             (np.concatenate(self._r), np.concatenate(self._c))),
                            shape=(self.n_rows, self.n_cols))
        return coo.tocsc()

    def pass_to(self, h: highspy.Highs) -> None:
        """Pass the model to ``h`` as arrays (the same model as :meth:`highs_lp`, without
        building a ``HighsLp`` attribute by attribute, which is much slower on large
        windows: ``bench/window_lp.py``).

        Raises
        ------
        RuntimeError
            When HiGHS refuses the model (its status in the message).
        """
        a = self.matrix()
        n = self.n_cols
        integral = (np.concatenate(self._integral) if self._integral
                    else np.zeros(0, dtype=bool)).astype(np.int32)
        status = h.passModel(
            n, self.n_rows, int(a.nnz), int(highspy.MatrixFormat.kColwise),
            int(highspy.ObjSense.kMaximize if self.maximize else highspy.ObjSense.kMinimize),
            0.0, _cat(self._cost), np.zeros(n), _cat(self._upper), _cat(self._lower_r),
            _cat(self._upper_r), a.indptr[:-1].astype(np.int32), a.indices.astype(np.int32),
            a.data.astype(float), integral)
        if status != highspy.HighsStatus.kOk:
            raise RuntimeError(f"HiGHS refused the model: {status}")

    def highs_lp(self) -> highspy.HighsLp:
        """The model in HiGHS's form (:func:`highs_lp`)."""
        a = self.matrix()
        empty = np.zeros(0)
        return highs_lp(
            np.concatenate(self._cost) if self._cost else empty,
            np.concatenate(self._upper) if self._upper else empty,
            np.concatenate(self._lower_r) if self._lower_r else empty,
            np.concatenate(self._upper_r) if self._upper_r else empty,
            a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data.astype(float),
            integral=np.concatenate(self._integral) if self._integral else None,
            maximize=self.maximize)


BASIS_LOWER, BASIS_BASIC, BASIS_UPPER = 0, 1, 2
"""``HighsBasisStatus`` codes as small integers: at the lower bound, basic, at the upper bound
(a row's status refers to its activity ``A x``)."""

_STATUS = tuple(highspy.HighsBasisStatus(i) for i in range(5))


@dataclass(frozen=True)
class Basis:
    """A simplex basis as arrays of ``HighsBasisStatus`` codes (:data:`BASIS_BASIC`, ...),
    one per column and one per row."""

    col_status: NDArray[np.int8]
    row_status: NDArray[np.int8]


def get_basis(h: highspy.Highs, lp: SparseLp, x: NDArray[np.float64],
              row_value: NDArray[np.float64]) -> Basis | None:
    """The basis HiGHS holds after a simplex solve of ``lp`` (None when it has none): the
    basic variables from HiGHS, a nonbasic column or row at its upper bound where its value
    (``x``, ``row_value``) is there, else at its lower bound. (``getBasis`` gives the same
    codes one Python object per entry: 20 times slower at 15,000 columns.)

    ``getBasicVariables`` needs the factored basis of a simplex run: on a model that
    presolve solved outright (no simplex iteration, e.g. a window LP whose pool rows have
    no entries) HiGHS holds an *alien* basis without a factorization, and the call dies
    with SIGSEGV. Such a basis, and every model without rows, columns or entries, is read
    with ``getBasis`` instead (small or trivial models: its cost does not matter)."""
    hb = h.getBasis()
    if not hb.valid or x.size != lp.n_cols or row_value.size != lp.n_rows:
        return None
    if hb.alien or lp.n_cols == 0 or lp.n_rows == 0 or not any(v.size for v in lp._v):
        return Basis(_codes(hb.col_status), _codes(hb.row_status))
    got = h.getBasicVariables()  # type: ignore[attr-defined]
    basic = np.asarray(got[1] if isinstance(got, tuple) else got, dtype=np.int64)
    upper, lower_r, upper_r = _cat(lp._upper), _cat(lp._lower_r), _cat(lp._upper_r)
    col = np.full(lp.n_cols, BASIS_LOWER, dtype=np.int8)
    row = np.full(lp.n_rows, BASIS_LOWER, dtype=np.int8)
    fin = np.isfinite(upper) & (upper > 0)
    at_up = np.zeros(lp.n_cols, dtype=bool)
    at_up[fin] = x[fin] >= upper[fin] - 1e-9 * np.maximum(upper[fin], 1.0)
    col[at_up] = BASIS_UPPER
    fin_r = np.isfinite(upper_r) & (upper_r > lower_r)
    at_up_r = np.zeros(lp.n_rows, dtype=bool)
    at_up_r[fin_r] = row_value[fin_r] >= upper_r[fin_r] - 1e-9 * np.maximum(
        np.abs(upper_r[fin_r]), 1.0)
    row[at_up_r] = BASIS_UPPER
    col[basic[basic >= 0]] = BASIS_BASIC
    row[-1 - basic[basic < 0]] = BASIS_BASIC
    return Basis(col, row)


def _codes(status: list[highspy.HighsBasisStatus]) -> NDArray[np.int8]:
    """HiGHS's basis statuses as :data:`BASIS_LOWER`, :data:`BASIS_BASIC` and
    :data:`BASIS_UPPER` (a nonbasic status without a bound side, as at its lower bound)."""
    codes = np.fromiter((int(v) for v in status), dtype=np.int8, count=len(status))
    return np.where((codes == BASIS_BASIC) | (codes == BASIS_UPPER), codes,
                    BASIS_LOWER).astype(np.int8)


def set_alien_basis(h: highspy.Highs, basis: Basis) -> bool:
    """Hand HiGHS a starting basis for the model it holds, marked *alien*: it need not have
    one basic variable per row nor be nonsingular (HiGHS keeps a nonsingular set of the
    columns marked basic and completes it with slacks). False when HiGHS refuses it, or
    when its sizes are not the model's (never handed to the native code)."""
    if (basis.col_status.size != h.getNumCol() or basis.row_status.size != h.getNumRow()):
        return False
    b = highspy.HighsBasis()
    b.col_status = [_STATUS[v] for v in basis.col_status.tolist()]
    b.row_status = [_STATUS[v] for v in basis.row_status.tolist()]
    b.alien = True
    b.valid = False
    return h.setBasis(b) == highspy.HighsStatus.kOk


def _shaped(coords: Coords, v: NDArray[np.float64]) -> NDArray[np.float64]:
    return v.reshape(coords.shape) if coords.labels is None else v


def _cat(parts: list[NDArray[np.float64]]) -> NDArray[np.float64]:
    return np.concatenate(parts) if parts else np.zeros(0)


@dataclass(frozen=True)
class HighsResult:
    """What one HiGHS run returned; the caller checks ``optimal`` (or ``has_solution``).

    Attributes
    ----------
    status : str
        HiGHS's model status in its own words (``"Optimal"``, ``"Time limit reached"``, ...).
    model_status : highspy.HighsModelStatus
    optimal, time_limit : bool
        The status is optimal; the run stopped at its time limit.
    has_solution : bool
        HiGHS holds a feasible primal solution (an optimum, or a MILP's incumbent).
    x, row_dual : float arrays
        Column values and row duals as HiGHS returned them (empty when it has none).
    objective, mip_dual_bound, mip_gap : float
        From HiGHS's info (``mip_*`` meaningful for a MILP only).
    solve_s : float
        Wall time of the run, s.
    iterations : int
        Simplex iterations of the run.
    row_value : float array
        Row activities ``A x`` (empty when HiGHS has none).
    """

    status: str
    model_status: highspy.HighsModelStatus
    optimal: bool
    time_limit: bool
    has_solution: bool
    x: NDArray[np.float64]
    row_dual: NDArray[np.float64]
    objective: float
    mip_dual_bound: float
    mip_gap: float
    solve_s: float
    iterations: int = 0
    row_value: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))


def solve(h: highspy.Highs, lp: highspy.HighsLp | None = None,
          start: NDArray[np.float64] | None = None, *, basis: Basis | None = None
          ) -> HighsResult:
    """Pass ``lp`` (unless the model is already in ``h``), set a starting solution ``start``
    (a MILP's warm start) or a starting basis (an LP's warm start, :func:`set_alien_basis`),
    run, and read the result back; the status is returned, not judged."""
    if lp is not None:
        h.passModel(lp)
    if start is not None:
        h.setSolution(int(start.size), np.arange(start.size, dtype=np.int32), start)
    if basis is not None:
        set_alien_basis(h, basis)
    t0 = time.perf_counter()
    h.run()
    solve_s = time.perf_counter() - t0
    status = h.getModelStatus()
    info = h.getInfo()
    sol = h.getSolution()
    return HighsResult(
        status=h.modelStatusToString(status), model_status=status,
        optimal=status == highspy.HighsModelStatus.kOptimal,
        time_limit=status == highspy.HighsModelStatus.kTimeLimit,
        has_solution=info.primal_solution_status == _FEASIBLE,
        x=np.asarray(sol.col_value, dtype=float), row_dual=np.asarray(sol.row_dual, dtype=float),
        objective=float(info.objective_function_value),
        mip_dual_bound=float(info.mip_dual_bound), mip_gap=float(info.mip_gap),
        solve_s=solve_s, iterations=int(info.simplex_iteration_count),
        row_value=np.asarray(sol.row_value, dtype=float))


def termination_name(status: highspy.HighsModelStatus) -> str:
    """A HiGHS status under the name Pyomo's reference path reports it by (``"optimal"``,
    ``"infeasible"``, ``"maxTimeLimit"``; otherwise the enum's own name)."""
    if status == highspy.HighsModelStatus.kOptimal:
        return "optimal"
    if status == highspy.HighsModelStatus.kInfeasible:
        return "infeasible"
    if status == highspy.HighsModelStatus.kTimeLimit:
        return "maxTimeLimit"
    # The enum's own name: a throw-away Highs() would print HiGHS's banner.
    return str(status.name).removeprefix("k")
