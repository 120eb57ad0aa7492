"""The per-slot assignment MILP of the per-slot policies, built in Pyomo in named phases.

The model is pure: :func:`create_slot_model` builds it from the arrays of a
:class:`SlotProblem`, :func:`solve_slot_model` solves it with HiGHS and checks the
termination condition, :func:`extract_choice` reads the chosen options back as an array
with the same option coordinate as the input. A notebook adds a what-if constraint through
the ``extra_constraints`` hook (a callable ``model -> None`` applied before solving).

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
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pyomo.environ as pyo
from numpy.typing import NDArray
from pyomo.opt import TerminationCondition

from workbench.optim.info import SolveInfo

ExtraConstraints = Callable[[pyo.ConcreteModel], None]
"""A what-if hook: receives the built model (sets ``J, K, P, D, L``, binaries ``z``)."""

_OK = {TerminationCondition.optimal, TerminationCondition.locallyOptimal}

# Pyomo's HiGHS interface redirects the process's stdout/stderr file descriptors while it
# solves; two threads doing so at once deadlock or raise. Solves are therefore serialised.
_SOLVE_LOCK = threading.Lock()


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


def _groups(index: NDArray[np.int64], size: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(size)]
    for k, i in enumerate(index.tolist()):
        if i >= 0:
            out[i].append(k)
    return out


def _add_sets(m: pyo.ConcreteModel, prob: SlotProblem) -> None:
    """Sets: jobs ``J``, options ``K``, pools ``P``, datacenters ``D``, links ``L``, supply
    rows ``S``."""
    m.J = pyo.Set(initialize=range(len(prob.job_ids)), ordered=True)
    m.K = pyo.Set(initialize=range(prob.n_options), ordered=True)
    m.P = pyo.Set(initialize=range(len(prob.pool_labels)), ordered=True)
    m.D = pyo.Set(initialize=range(len(prob.dc_labels)), ordered=True)
    m.L = pyo.Set(initialize=range(len(prob.link_labels)), ordered=True)
    m.S = pyo.Set(initialize=range(len(prob.supply_labels)), ordered=True)


def _add_variables(m: pyo.ConcreteModel, prob: SlotProblem) -> None:
    """Variables: ``z[k]`` in {0, 1}, option ``k`` is chosen."""
    m.z = pyo.Var(m.K, domain=pyo.Binary)


def _add_constraints(m: pyo.ConcreteModel, prob: SlotProblem) -> None:
    """Constraints, a row where it can bind::

        sum_{k in K_j} z[k] <= 1   (= 1 for an inference job)    one choice per job j
        sum_{k in K_p} n[k] z[k] <= C[p]                         pool p, when over-asked
        sum_{k in K_d} P[k] z[k] <= Pcap[d]                      datacenter d, finite cap
        sum_{k in K_l} gb[k] z[k] <= B[l] D / 8                  link l
        sum_{k in K_s} e[k] z[k] <= H[s]                         supply row s
    """
    by_job = _groups(prob.job_index, len(prob.job_ids))
    by_pool = _groups(prob.pool_index, len(prob.pool_labels))
    by_dc = _groups(prob.dc_index, len(prob.dc_labels))
    by_link = _groups(prob.link_index, len(prob.link_labels))
    by_supply = _groups(prob.supply_index, len(prob.supply_labels))
    z = m.z

    def one_choice(mm: pyo.ConcreteModel, j: int) -> object:
        if not by_job[j]:
            return pyo.Constraint.Skip
        total = sum(z[k] for k in by_job[j])
        return total == 1 if prob.must_place[j] else total <= 1

    def capacity(mm: pyo.ConcreteModel, p: int) -> object:
        if not by_pool[p] or int(prob.n_gpus[by_pool[p]].sum()) <= prob.pool_capacity[p]:
            return pyo.Constraint.Skip
        return sum(int(prob.n_gpus[k]) * z[k] for k in by_pool[p]) <= int(prob.pool_capacity[p])

    def power(mm: pyo.ConcreteModel, d: int) -> object:
        cap = float(prob.power_cap_kw[d])
        if not by_dc[d] or not math.isfinite(cap):
            return pyo.Constraint.Skip
        return sum(float(prob.power_kw[k]) * z[k] for k in by_dc[d]) <= cap

    def link(mm: pyo.ConcreteModel, lk: int) -> object:
        if not by_link[lk]:
            return pyo.Constraint.Skip
        return (sum(float(prob.transfer_gb[k]) * z[k] for k in by_link[lk])
                <= float(prob.link_capacity_gb[lk]))

    def own_supply(mm: pyo.ConcreteModel, s: int) -> object:
        if not by_supply[s]:
            return pyo.Constraint.Skip
        return (sum(float(prob.supply_kwh[k]) * z[k] for k in by_supply[s])
                <= float(prob.supply_cap_kwh[s]))

    m.one_choice = pyo.Constraint(m.J, rule=one_choice)
    m.capacity = pyo.Constraint(m.P, rule=capacity)
    m.power_cap = pyo.Constraint(m.D, rule=power)
    m.link_volume = pyo.Constraint(m.L, rule=link)
    m.own_supply = pyo.Constraint(m.S, rule=own_supply)


def _add_objective(m: pyo.ConcreteModel, prob: SlotProblem) -> None:
    """Objective: maximise ``sum_k coef[k] * z[k]``."""
    coef = prob.coef.tolist()
    m.obj = pyo.Objective(expr=sum(coef[k] * m.z[k] for k in m.K), sense=pyo.maximize)


def create_slot_model(prob: SlotProblem) -> pyo.ConcreteModel:
    """Build the slot MILP (see the module docstring) in four named phases."""
    m = pyo.ConcreteModel(name="slot_assignment")
    _add_sets(m, prob)
    _add_variables(m, prob)
    _add_constraints(m, prob)
    _add_objective(m, prob)
    return m


def solve_slot_model(
    m: pyo.ConcreteModel,
    *,
    mip_rel_gap: float = 1e-3,
    time_limit_s: float = 10.0,
    extra_constraints: ExtraConstraints | None = None,
) -> SolveInfo:
    """Solve with HiGHS (``SolverFactory('highs')``); load the solution only when optimal.

    Returns
    -------
    SolveInfo
        ``status`` is HiGHS's termination condition; ``objective`` is set only when a
        solution was loaded. The caller decides what to do when it is not optimal.
    """
    if extra_constraints is not None:
        extra_constraints(m)
    solver = pyo.SolverFactory("highs")
    t0 = time.perf_counter()
    with _SOLVE_LOCK:
        results = solver.solve(
            m,
            load_solutions=False,
            options={"mip_rel_gap": float(mip_rel_gap), "time_limit": float(time_limit_s),
                     "output_flag": False},
        )
    solve_s = time.perf_counter() - t0
    cond = results.solver.termination_condition
    if cond not in _OK or len(results.solution) == 0:
        msg = str(getattr(results.solver, "termination_message", "") or cond)
        return SolveInfo(status=str(cond), solve_s=solve_s, message=msg)
    m.solutions.load_from(results)
    gap = None
    lb, ub = results.problem.lower_bound, results.problem.upper_bound
    if lb is not None and ub is not None and math.isfinite(lb) and math.isfinite(ub):
        gap = abs(ub - lb) / max(abs(ub), 1e-9)
    return SolveInfo(status=str(cond), solve_s=solve_s, objective=float(pyo.value(m.obj)),
                     gap=gap)


def extract_choice(m: pyo.ConcreteModel) -> NDArray[np.bool_]:
    """Chosen options as a boolean array over the option axis of the problem."""
    return np.array([(m.z[k].value or 0.0) > 0.5 for k in m.K], dtype=bool)


def solve_slot_problem(
    prob: SlotProblem,
    *,
    mip_rel_gap: float = 1e-3,
    time_limit_s: float = 10.0,
    extra_constraints: ExtraConstraints | None = None,
) -> tuple[NDArray[np.bool_] | None, SolveInfo]:
    """Create, solve and extract in one call; the choice is None when the solve failed."""
    t0 = time.perf_counter()
    if prob.n_options == 0:
        # Nothing to decide (no active job has an option): the empty choice is optimal.
        return np.zeros(0, dtype=bool), SolveInfo(status="empty", solve_s=0.0, objective=0.0)
    m = create_slot_model(prob)
    info = solve_slot_model(m, mip_rel_gap=mip_rel_gap, time_limit_s=time_limit_s,
                            extra_constraints=extra_constraints)
    info = replace(info, solve_s=time.perf_counter() - t0)
    if info.objective is None:
        return None, info
    return extract_choice(m), info
