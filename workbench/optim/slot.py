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
          sum_{k in K_d} P[k] * z[k] <= Pcap[d]          datacenter d with a power cap (kW)
          sum_{k in K_l} gb[k] * z[k] <= B[l] * D / 8    link l (checkpoint GB per slot)
          sum_{k in K_s} e[k] * z[k] <= H[s]             supply row s (own supply, kWh)

A *supply row* bounds the energy its options draw from a site's own supply (renewables and
battery) in the slot; a planner that splits a site's options into a copy on that supply
and a copy on the grid uses it (:func:`workbench.policies.supplyplan.own_supply_problem`).

A notebook adds a what-if constraint through the ``extra_constraints`` hook
(:data:`ExtraConstraints`, applied to the Pyomo model before solving).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
        Average facility power of each option over the slot, kW.
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
    """

    job_ids: tuple[str, ...]
    job_index: NDArray[np.int64]
    coef: NDArray[np.float64]
    must_place: NDArray[np.bool_]
    pool_labels: tuple[str, ...]
    pool_index: NDArray[np.int64]
    n_gpus: NDArray[np.int64]
    pool_capacity: NDArray[np.int64]
    dc_labels: tuple[str, ...]
    dc_index: NDArray[np.int64]
    power_kw: NDArray[np.float64]
    power_cap_kw: NDArray[np.float64]
    link_labels: tuple[str, ...]
    link_index: NDArray[np.int64]
    transfer_gb: NDArray[np.float64]
    link_capacity_gb: NDArray[np.float64]
    supply_labels: tuple[str, ...] = ()
    supply_index: NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64))
    supply_kwh: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    supply_cap_kwh: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        k = self.job_index.size
        if not self.supply_labels and self.supply_index.size == 0:
            # No supply rows: every option in none.
            object.__setattr__(self, "supply_index", np.full(k, -1, dtype=np.int64))
            object.__setattr__(self, "supply_kwh", np.zeros(k))
        if self.supply_cap_kwh.shape != (len(self.supply_labels),):
            raise ValueError("SlotProblem.supply_cap_kwh needs one entry per supply row")
        for name in ("coef", "pool_index", "n_gpus", "dc_index", "power_kw", "link_index",
                     "transfer_gb", "supply_index", "supply_kwh"):
            if getattr(self, name).shape != (k,):
                raise ValueError(f"SlotProblem.{name} must have shape ({k},) like job_index")
        if not np.all(np.isfinite(self.coef)):
            raise ValueError("SlotProblem.coef holds NaN or inf; every option needs a weight")
        if self.must_place.shape != (len(self.job_ids),):
            raise ValueError("SlotProblem.must_place needs one entry per job")

    @property
    def n_options(self) -> int:
        return int(self.job_index.size)

    def subset(self, keep: NDArray[np.bool_]) -> SlotProblem:
        """The same problem with only the options where ``keep`` is True."""
        return SlotProblem(
            job_ids=self.job_ids,
            job_index=self.job_index[keep],
            coef=self.coef[keep],
            must_place=self.must_place,
            pool_labels=self.pool_labels,
            pool_index=self.pool_index[keep],
            n_gpus=self.n_gpus[keep],
            pool_capacity=self.pool_capacity,
            dc_labels=self.dc_labels,
            dc_index=self.dc_index[keep],
            power_kw=self.power_kw[keep],
            power_cap_kw=self.power_cap_kw,
            link_labels=self.link_labels,
            link_index=self.link_index[keep],
            transfer_gb=self.transfer_gb[keep],
            link_capacity_gb=self.link_capacity_gb,
            supply_labels=self.supply_labels,
            supply_index=self.supply_index[keep],
            supply_kwh=self.supply_kwh[keep],
            supply_cap_kwh=self.supply_cap_kwh,
        )

    def supply_used_kwh(self, chosen: NDArray[np.bool_]) -> NDArray[np.float64]:
        """Energy the ``chosen`` options draw from each supply row, kWh (S,)."""
        inside = self.supply_index >= 0
        return np.asarray(np.bincount(
            self.supply_index[inside], weights=(chosen.astype(float) * self.supply_kwh)[inside],
            minlength=len(self.supply_labels)), dtype=float)

    def is_feasible(self, chosen: NDArray[np.bool_], tol: float = 1e-6) -> bool:
        """Whether a 0/1 choice meets every built-in constraint (not the hook's)."""
        c = chosen.astype(float)
        per_job = np.bincount(self.job_index, weights=c, minlength=len(self.job_ids))
        if np.any(per_job > 1 + tol) or np.any(per_job[self.must_place] < 1 - tol):
            return False
        used = np.bincount(self.pool_index, weights=c * self.n_gpus,
                           minlength=len(self.pool_labels))
        if np.any(used > self.pool_capacity + tol):
            return False
        power = np.bincount(self.dc_index, weights=c * self.power_kw,
                            minlength=len(self.dc_labels))
        if np.any(power > self.power_cap_kw + tol):
            return False
        moving = self.link_index >= 0
        gb = np.bincount(self.link_index[moving], weights=(c * self.transfer_gb)[moving],
                         minlength=len(self.link_labels))
        if np.any(gb > self.link_capacity_gb + tol):
            return False
        return not np.any(self.supply_used_kwh(chosen) > self.supply_cap_kwh + tol)
