"""The per-slot assignment MILP of the per-slot policies: its data and its maths.

:class:`SlotProblem` holds one slot's problem as arrays over an option axis. Two paths solve
the same model: the fast path (:mod:`workbench.optim.fastslot`, HiGHS arrays, the default)
and the Pyomo model (:mod:`workbench.optim.slotpyomo`), which any solver Pyomo drives can
solve (:func:`pyomo_solver`). This module imports neither HiGHS nor Pyomo.

Maths, with binaries ``z[k]`` (option ``k`` of job ``j(k)`` is chosen)::

    max   sum_k coef[k] * z[k]
    s.t.  sum_{k in K_j} z[k] <= 1                      training job j   (one choice)
          sum_{k in K_j} z[k]  = 1                      inference job j  (placed every slot)
          sum_{k in K_p} n[k] * z[k] <= C[p]             every GPU pool p (capacity)
          sum_{k in K_d} P[k] * z[k]
            + sum_{k in M_d} Ps[k] * z[k] <= Pcap[d]     datacenter d with a power cap (kW)
          sum_{k in K_l} gb[k] * z[k] <= B[l] * D / 8    link l (checkpoint GB per slot)
          sum_{k in K_s} e[k] * z[k] <= H[s]             supply row s (own supply, kWh)

``M_d`` are the options that move data out of ``d`` (``src_dc_index``): the sending half of
their transfer energy (``Ps``, ``src_power_kw``) is metered at ``d``, as the site meter does
(:mod:`workbench.meter`), so an option may have entries in two power rows.

Each family of rows is defined once, by :meth:`SlotProblem.rows` (:class:`SlotRows`: each
option's row and coefficient in it, each row's bounds); the feasibility check, the residual
capacity, the HiGHS matrix, its repair, the Pyomo model and the greedy fallback all read it.

A *supply row* bounds the energy its options draw from a site's own supply (renewables and
battery) in the slot; a planner that splits a site's options into a copy on that supply
and a copy on the grid uses it (:func:`workbench.policies.supplyplan.own_supply_problem`).

A notebook adds a what-if constraint through the ``extra_constraints`` hook
(:data:`ExtraConstraints`, applied to the Pyomo model before solving).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import pyomo.environ as pyo

ExtraConstraints = Callable[["pyo.ConcreteModel"], None]
"""A what-if hook: receives the built Pyomo model (sets ``J, K, P, D, L``, binaries ``z``)."""

FAST = "fast"
"""The slot solver that solves the model as HiGHS arrays (:mod:`workbench.optim.fastslot`)."""

PYOMO = "pyomo"
"""The slot solver that builds the Pyomo model; ``pyomo:NAME`` hands it to Pyomo's
``SolverFactory(NAME)`` (``highs``, ``cbc``, ``glpk``, ``gurobi``...)."""

PYOMO_DEFAULT = "highs"
"""The Pyomo solver of a plain ``pyomo`` (HiGHS through Pyomo's interface)."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


def pyomo_solver(solver: str) -> str | None:
    """The Pyomo solver name a slot-solver choice names: None for ``"fast"``,
    :data:`PYOMO_DEFAULT` for ``"pyomo"``, ``NAME`` for ``"pyomo:NAME"``.

    Raises
    ------
    ValueError
        For any other text (the message lists the forms).
    """
    if solver == FAST:
        return None
    if solver == PYOMO:
        return PYOMO_DEFAULT
    head, sep, name = solver.partition(":")
    if head == PYOMO and sep and _NAME.fullmatch(name):
        return name
    raise ValueError(f"unknown slot solver {solver!r}; use fast, pyomo or pyomo:NAME with "
                     "NAME a solver Pyomo drives (pyomo:highs, pyomo:cbc, pyomo:gurobi)")


def _row_sums(index: NDArray[np.int64], coef: NDArray[np.float64],
              chosen: NDArray[np.bool_] | None, n_rows: int) -> NDArray[np.float64]:
    """``sum coef[k, m] * z[k]`` per row over the entries ``index[k, m] = r`` (-1: none),
    ``z`` the ``chosen`` options (None: all)."""
    weights = coef if chosen is None else coef * np.asarray(chosen, dtype=bool)[:, None]
    on = index >= 0
    if on.all():  # no padding: no copy
        return np.asarray(np.bincount(index.ravel(), weights=weights.ravel(),
                                      minlength=n_rows), dtype=float)
    return np.asarray(np.bincount(index[on], weights=weights[on], minlength=n_rows),
                      dtype=float)


@dataclass(frozen=True)
class SlotRows:
    """One family of rows of the slot MILP::

        lower[r] <= sum_{(k, m): index[k, m] = r} coef[k, m] * z[k] <= upper[r]

    Attributes
    ----------
    label : str
        The family's name (the Pyomo model's constraint of that name).
    axis : str
        The symbol of its rows (the Pyomo model's set of that name: ``J``, ``P``, ...).
    index : int array (K, M)
        Row of each of option ``k``'s ``M`` entries in the family, -1 for none.
    coef : float array (K, M)
        The option's coefficient in that row.
    lower, upper : float arrays (R,)
        Row bounds (``-inf``/``inf`` where open).
    capacity_field : str
        The :class:`SlotProblem` field that holds ``upper`` ("" for the one-choice rows).
    binding_only : bool
        The MILP has a row only where its options together could exceed ``upper``; False:
        wherever the row has options and a finite ``upper`` (a row then stays in the
        matrix from slot to slot as its bound moves, e.g. a power cap under a grid event).
    """

    label: str
    axis: str
    index: NDArray[np.int64]
    coef: NDArray[np.float64]
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    capacity_field: str = ""
    binding_only: bool = True

    @property
    def n_rows(self) -> int:
        return int(self.upper.size)

    def used(self, chosen: NDArray[np.bool_] | None = None) -> NDArray[np.float64]:
        """``sum coef * z`` per row for the ``chosen`` options (None: every option), (R,)."""
        return _row_sums(self.index, self.coef, chosen, self.n_rows)

    def built(self) -> NDArray[np.bool_]:
        """The rows the MILP has (see ``binding_only``), (R,)."""
        if self.binding_only:
            return self.used() > self.upper
        has = np.bincount(self.index[self.index >= 0], minlength=self.n_rows) > 0
        return has & np.isfinite(self.upper)


@dataclass(frozen=True)
class StackedRows:
    """Row families stacked into one row space (each option's entries side by side).

    Attributes
    ----------
    index : int array (K, M)
        Row of each entry of option ``k`` in the stacked space, -1 for none.
    value : float array (K, M)
        The entry's coefficient.
    lower, upper : float arrays (R,)
        Bounds of the stacked rows.
    row_of : dict label -> int array
        Each family row's stacked row, -1 where it was left out.
    """

    index: NDArray[np.int64]
    value: NDArray[np.float64]
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    row_of: dict[str, NDArray[np.int64]]

    def used(self, chosen: NDArray[np.bool_]) -> NDArray[np.float64]:
        """``sum value * z`` per stacked row for the ``chosen`` options, (R,)."""
        return _row_sums(self.index, self.value, chosen, self.upper.size)

    def fits(self, left: NDArray[np.float64], ks: NDArray[np.int64],
             tol: float) -> NDArray[np.bool_]:
        """Whether each option ``ks`` fits within ``left`` (room per stacked row)."""
        idx = self.index[ks]
        return np.all((self.value[ks] <= left[idx] + tol) | (idx < 0), axis=1)

    def draw(self, left: NDArray[np.float64], k: int) -> None:
        """Take option ``k``'s entries from ``left``, in place."""
        on = self.index[k] >= 0
        np.subtract.at(left, self.index[k][on], self.value[k][on])


def stack_rows(families: Sequence[SlotRows],
               present: Sequence[NDArray[np.bool_]] | None = None) -> StackedRows:
    """Number the rows of ``families`` one after the other, family by family (only the
    ``present`` rows of each when given); each option's entries keep the families' order."""
    n_rows = 0
    index, value, lower, upper = [], [], [], []
    row_of: dict[str, NDArray[np.int64]] = {}
    for i, fam in enumerate(families):
        keep = np.ones(fam.n_rows, dtype=bool) if present is None else present[i]
        row = np.full(fam.n_rows + 1, -1, dtype=np.int64)  # the last: an absent entry's
        count = int(keep.sum())
        row[:-1][keep] = n_rows + np.arange(count)
        n_rows += count
        row_of[fam.label] = row[:-1]
        index.append(row[fam.index])
        value.append(fam.coef)
        lower.append(fam.lower[keep])
        upper.append(fam.upper[keep])
    return StackedRows(index=np.hstack(index), value=np.asarray(np.hstack(value), dtype=float),
                       lower=np.concatenate(lower), upper=np.concatenate(upper),
                       row_of=row_of)


_OPTION: dict[str, Any] = {"axis": "option"}
"""Field metadata of :class:`SlotProblem`'s per-option arrays (first axis: the options)."""


@dataclass(frozen=True)
class SlotProblem:
    """Arrays of one slot's assignment problem; per-option arrays share one option axis.

    Attributes
    ----------
    job_ids : tuple of str
        Job labels; ``job_index[k]`` points into it.
    job_index : int array (K,)
        Job of each option.
    coef : float array (K,)
        Objective weight of each option (NetCoef; larger is better).
    must_place : bool array (J,)
        True for jobs that must take exactly one option (inference services).
    pool_labels : tuple of str
        GPU pool labels (``"datacenter/gpu_type"``); ``pool_index[k]`` points into it.
    pool_index, n_gpus : int arrays (K,)
        Pool used by each option and how many of its accelerators.
    pool_capacity : int array (P,)
        Accelerators per pool.
    dc_labels : tuple of str
        Datacenter labels; ``dc_index[k]`` points into it.
    dc_index : int array (K,)
    power_kw : float array (K,)
        Average power option ``k`` adds to its datacenter's meter over the slot, kW.
    power_cap_kw : float array (D,)
        Power cap per datacenter, kW (``inf`` = none).
    link_labels : tuple of str
        Link labels; ``link_index[k]`` is -1 when option ``k`` moves no checkpoint.
    link_index : int array (K,)
    transfer_gb : float array (K,)
        Checkpoint GB that option ``k`` moves over its link.
    link_capacity_gb : float array (L,)
        GB a link can move in one slot: ``bandwidth_gbps * slot_s / 8``.
    supply_labels : tuple of str
        Supply row labels (none by default); ``supply_index[k]`` is -1 when option ``k``
        is in no supply row.
    supply_index : int array (K,)
    supply_kwh : float array (K,)
        Energy option ``k`` draws from its supply row over the slot, kWh.
    supply_cap_kwh : float array (S,)
        Energy each supply row can deliver over the slot, kWh.
    src_dc_index : int array (K, M)
        The datacenters option ``k`` moves data out of (-1: none; ``M`` is 0 by default:
        no option moves anything out of a metered site).
    src_power_kw : float array (K, M)
        The sending half of that transfer's energy, as average power over the slot at
        ``src_dc_index``, kW (counted in that datacenter's power row).
    """

    job_ids: tuple[str, ...]
    job_index: NDArray[np.int64] = field(metadata=_OPTION)
    coef: NDArray[np.float64] = field(metadata=_OPTION)
    must_place: NDArray[np.bool_]
    pool_labels: tuple[str, ...]
    pool_index: NDArray[np.int64] = field(metadata=_OPTION)
    n_gpus: NDArray[np.int64] = field(metadata=_OPTION)
    pool_capacity: NDArray[np.int64]
    dc_labels: tuple[str, ...]
    dc_index: NDArray[np.int64] = field(metadata=_OPTION)
    power_kw: NDArray[np.float64] = field(metadata=_OPTION)
    power_cap_kw: NDArray[np.float64]
    link_labels: tuple[str, ...]
    link_index: NDArray[np.int64] = field(metadata=_OPTION)
    transfer_gb: NDArray[np.float64] = field(metadata=_OPTION)
    link_capacity_gb: NDArray[np.float64]
    supply_labels: tuple[str, ...] = ()
    supply_index: NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64), metadata=_OPTION)
    supply_kwh: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0),
                                            metadata=_OPTION)
    supply_cap_kwh: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    src_dc_index: NDArray[np.int64] = field(
        default_factory=lambda: np.zeros((0, 0), dtype=np.int64), metadata=_OPTION)
    src_power_kw: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)),
                                              metadata=_OPTION)

    def __post_init__(self) -> None:
        k = self.job_index.size
        if not self.supply_labels and self.supply_index.size == 0:
            # No supply rows: every option in none.
            object.__setattr__(self, "supply_index", np.full(k, -1, dtype=np.int64))
            object.__setattr__(self, "supply_kwh", np.zeros(k))
        if self.src_dc_index.size == 0 and self.src_power_kw.size == 0:
            # No sending halves: no option has an entry in another datacenter's row.
            object.__setattr__(self, "src_dc_index", np.zeros((k, 0), dtype=np.int64))
            object.__setattr__(self, "src_power_kw", np.zeros((k, 0)))
        if self.supply_cap_kwh.shape != (len(self.supply_labels),):
            raise ValueError("SlotProblem.supply_cap_kwh needs one entry per supply row")
        for name in _option_fields():
            value = getattr(self, name)
            if name.startswith("src_"):
                if value.ndim != 2 or value.shape != (k, self.src_dc_index.shape[1]):
                    raise ValueError(f"SlotProblem.{name} must have shape ({k}, M) like "
                                     "job_index and the other src_ array")
            elif value.shape != (k,):
                raise ValueError(f"SlotProblem.{name} must have shape ({k},) like job_index")
        if not np.all(np.isfinite(self.coef)):
            raise ValueError("SlotProblem.coef holds NaN or inf; every option needs a weight")
        if self.must_place.shape != (len(self.job_ids),):
            raise ValueError("SlotProblem.must_place needs one entry per job")
        if np.any(self.src_dc_index >= len(self.dc_labels)) or np.any(self.src_dc_index < -1):
            raise ValueError("SlotProblem.src_dc_index must point into dc_labels (-1: none)")

    @property
    def n_options(self) -> int:
        return int(self.job_index.size)

    def take(self, index: NDArray[np.int64]) -> SlotProblem:
        """The problem over the options ``index`` (a subset, a reordering or copies): every
        per-option array taken at once, the rows' bounds unchanged."""
        return replace(self, **{name: getattr(self, name)[index] for name in _option_fields()})

    def subset(self, keep: NDArray[np.bool_]) -> SlotProblem:
        """The same problem with only the options where ``keep`` is True."""
        return self.take(np.flatnonzero(keep))

    def rows(self) -> tuple[SlotRows, ...]:
        """Every row family of the MILP, in the matrix's order (see the module docstring)."""
        k = self.n_options

        def capacity(cap: NDArray[Any]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
            return np.full(cap.size, -np.inf), np.asarray(cap, dtype=float)

        def column(a: NDArray[Any]) -> NDArray[Any]:
            return a.reshape(k, 1)  # a view: one entry per option

        power_index, power_coef = column(self.dc_index), column(
            np.asarray(self.power_kw, dtype=float))
        if self.src_dc_index.shape[1]:  # sending halves: entries in a second row
            power_index = np.hstack([power_index, self.src_dc_index])
            power_coef = np.hstack([power_coef, self.src_power_kw.astype(float)])
        return (
            SlotRows("one_choice", "J", column(self.job_index), np.ones((k, 1)),
                     np.where(self.must_place, 1.0, -np.inf), np.ones(len(self.job_ids)),
                     binding_only=False),
            SlotRows("capacity", "P", column(self.pool_index),
                     column(self.n_gpus.astype(float)), *capacity(self.pool_capacity),
                     "pool_capacity"),
            SlotRows("power_cap", "D", power_index, power_coef,
                     *capacity(self.power_cap_kw), "power_cap_kw", binding_only=False),
            SlotRows("link_volume", "L", column(self.link_index),
                     column(np.asarray(self.transfer_gb, dtype=float)),
                     *capacity(self.link_capacity_gb), "link_capacity_gb"),
            SlotRows("own_supply", "S", column(self.supply_index),
                     column(np.asarray(self.supply_kwh, dtype=float)),
                     *capacity(self.supply_cap_kwh), "supply_cap_kwh"),
        )

    def residual(self, chosen: NDArray[np.bool_]) -> dict[str, NDArray[np.float64]]:
        """Capacity each row has left once the ``chosen`` options are placed (``upper -
        used``), per family label."""
        return {fam.label: fam.upper - fam.used(chosen) for fam in self.rows()}

    def with_room_left(self, fixed: NDArray[np.bool_]) -> SlotProblem:
        """The same options with every capacity lowered by what the ``fixed`` options use
        (an integer capacity rounded)."""
        left = self.residual(fixed)
        out: dict[str, Any] = {}
        for fam in self.rows():
            if fam.capacity_field:
                old = getattr(self, fam.capacity_field)
                new = left[fam.label]
                out[fam.capacity_field] = (np.rint(new).astype(old.dtype)
                                           if np.issubdtype(old.dtype, np.integer) else new)
        return replace(self, **out)

    def is_feasible(self, chosen: NDArray[np.bool_], tol: float = 1e-6) -> bool:
        """Whether a 0/1 choice meets every built-in constraint (not the hook's)."""
        for fam in self.rows():
            used = fam.used(chosen)
            if np.any(used > fam.upper + tol) or np.any(used < fam.lower - tol):
                return False
        return True


def _option_fields() -> tuple[str, ...]:
    """The names of :class:`SlotProblem`'s per-option arrays (marked in its fields)."""
    return tuple(f.name for f in fields(SlotProblem) if f.metadata.get("axis") == "option")
