"""The per-slot assignment MILP (:mod:`workbench.optim.slot`) as a Pyomo model, built in
named phases, for any solver Pyomo drives.

The model is pure: :func:`create_slot_model` builds it from the arrays of a
:class:`~workbench.optim.slot.SlotProblem` (its row families,
:meth:`~workbench.optim.slot.SlotProblem.rows`, the same the fast path's matrix is built
from), :func:`solve_slot_model` solves it with the
Pyomo solver named (``SolverFactory(name)``, HiGHS by default) and checks the termination
condition, :func:`extract_choice` reads the chosen options back as an array with the same
option coordinate as the input. The ``extra_constraints`` hook (a callable ``model ->
None``) is applied before solving.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pyomo.environ as pyo
from numpy.typing import NDArray
from pyomo.opt import TerminationCondition

from workbench.optim.info import SolveInfo
from workbench.optim.slot import PYOMO_DEFAULT, ExtraConstraints, SlotProblem, SlotRows

log = logging.getLogger(__name__)

_OK = {TerminationCondition.optimal, TerminationCondition.locallyOptimal}

# Pyomo's HiGHS interface redirects the process's stdout/stderr file descriptors while it
# solves; two threads doing so at once deadlock or raise. Solves are therefore serialised.
_SOLVE_LOCK = threading.Lock()

_OPTIONS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "highs": ("mip_rel_gap", "time_limit", {"output_flag": False}),
    "appsi_highs": ("mip_rel_gap", "time_limit", {"output_flag": False}),
    "cbc": ("ratioGap", "seconds", {}),
    "glpk": ("mipgap", "tmlim", {}),
    "gurobi": ("MIPGap", "TimeLimit", {}),
    "gurobi_direct": ("MIPGap", "TimeLimit", {}),
    "gurobi_persistent": ("MIPGap", "TimeLimit", {}),
    "cplex": ("mipgap", "timelimit", {}),
    "scip": ("limits/gap", "limits/time", {}),
}
"""Per Pyomo solver: its names for the relative MIP gap and the time limit (s), and other
options it is given. Another solver gets no options (a warning says so)."""


@contextmanager
def _pyomo_quiet() -> Iterator[None]:
    """Pyomo logs a traceback when a solver's executable is missing: one line says it."""
    logger = logging.getLogger("pyomo")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_available(name: str) -> None:
    """Raise ValueError (one line) unless Pyomo can run its solver ``name`` here."""
    with _pyomo_quiet():
        available = bool(pyo.SolverFactory(name).available(exception_flag=False))
    if not available:
        raise ValueError(f"--solver pyomo:{name}: Pyomo finds no solver {name!r} on this "
                         "machine (install it, or use --solver pyomo:highs or fast)")


def solver_options(name: str, mip_rel_gap: float, time_limit_s: float) -> dict[str, Any]:
    """The options the Pyomo solver ``name`` is given (:data:`_OPTIONS`)."""
    if name not in _OPTIONS:
        log.warning("Pyomo solver %r: the MIP gap and time limit are not passed (options "
                    "known for %s)", name, ", ".join(sorted(_OPTIONS)))
        return {}
    gap, limit, other = _OPTIONS[name]
    return {gap: float(mip_rel_gap), limit: float(time_limit_s), **other}


def _terms(fam: SlotRows) -> list[list[tuple[int, float]]]:
    """Each row's (option, coefficient) entries."""
    out: list[list[tuple[int, float]]] = [[] for _ in range(fam.n_rows)]
    ks, ms = np.nonzero(fam.index >= 0)
    for k, r, c in zip(ks.tolist(), fam.index[ks, ms].tolist(), fam.coef[ks, ms].tolist(),
                       strict=True):
        out[r].append((k, c))
    return out


def _add_sets(m: pyo.ConcreteModel, prob: SlotProblem, families: Sequence[SlotRows]) -> None:
    """Sets: options ``K`` and the rows of each family: jobs ``J``, pools ``P``,
    datacenters ``D``, links ``L``, supply rows ``S``."""
    m.K = pyo.Set(initialize=range(prob.n_options), ordered=True)
    for fam in families:
        m.add_component(fam.axis, pyo.Set(initialize=range(fam.n_rows), ordered=True))


def _add_variables(m: pyo.ConcreteModel, prob: SlotProblem) -> None:
    """Variables: ``z[k]`` in {0, 1}, option ``k`` is chosen."""
    m.z = pyo.Var(m.K, domain=pyo.Binary)


def _add_constraints(m: pyo.ConcreteModel, families: Sequence[SlotRows]) -> None:
    """Constraints: one per row family (named by its label, over its set), a row where the
    family builds one (:meth:`~workbench.optim.slot.SlotRows.built`)::

        lower[r] <= sum_{(k, m): index[k, m] = r} coef[k, m] z[k] <= upper[r]

    that is ``one_choice`` (``<= 1``, ``= 1`` for an inference job), ``capacity`` (pools),
    ``power_cap`` (datacenters, sending halves included), ``link_volume``, ``own_supply``.
    """
    z = m.z
    for fam in families:
        terms, built = _terms(fam), fam.built()
        lower, upper = fam.lower.tolist(), fam.upper.tolist()

        def row(mm: pyo.ConcreteModel, r: int, terms: list[list[tuple[int, float]]] = terms,
                built: NDArray[np.bool_] = built, lower: list[float] = lower,
                upper: list[float] = upper) -> object:
            if not built[r]:
                return pyo.Constraint.Skip
            total = sum(c * z[k] for k, c in terms[r])
            if lower[r] == upper[r]:
                return total == upper[r]
            return (None if math.isinf(lower[r]) else lower[r], total,
                    None if math.isinf(upper[r]) else upper[r])

        m.add_component(fam.label, pyo.Constraint(m.component(fam.axis), rule=row))


def _add_objective(m: pyo.ConcreteModel, prob: SlotProblem) -> None:
    """Objective: maximise ``sum_k coef[k] * z[k]``."""
    coef = prob.coef.tolist()
    m.obj = pyo.Objective(expr=sum(coef[k] * m.z[k] for k in m.K), sense=pyo.maximize)


def create_slot_model(prob: SlotProblem) -> pyo.ConcreteModel:
    """Build the slot MILP (see the module docstring) in four named phases."""
    m = pyo.ConcreteModel(name="slot_assignment")
    families = prob.rows()
    _add_sets(m, prob, families)
    _add_variables(m, prob)
    _add_constraints(m, families)
    _add_objective(m, prob)
    return m


def solve_slot_model(
    m: pyo.ConcreteModel,
    *,
    mip_rel_gap: float = 1e-3,
    time_limit_s: float = 10.0,
    extra_constraints: ExtraConstraints | None = None,
    solver: str = PYOMO_DEFAULT,
) -> SolveInfo:
    """Solve with ``SolverFactory(solver)`` (HiGHS by default); load the solution only when
    optimal.

    Returns
    -------
    SolveInfo
        ``status`` is the solver's termination condition; ``objective`` is set only when a
        solution was loaded. The caller decides what to do when it is not optimal.
    """
    if extra_constraints is not None:
        extra_constraints(m)
    opt = pyo.SolverFactory(solver)
    t0 = time.perf_counter()
    with _SOLVE_LOCK:
        results = opt.solve(m, load_solutions=False,
                            options=solver_options(solver, mip_rel_gap, time_limit_s))
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
    solver: str = PYOMO_DEFAULT,
) -> tuple[NDArray[np.bool_] | None, SolveInfo]:
    """Create, solve (with the Pyomo solver ``solver``) and extract in one call; the choice
    is None when the solve failed."""
    t0 = time.perf_counter()
    if prob.n_options == 0:
        # Nothing to decide (no active job has an option): the empty choice is optimal.
        return np.zeros(0, dtype=bool), SolveInfo(status="empty", solve_s=0.0, objective=0.0)
    m = create_slot_model(prob)
    info = solve_slot_model(m, mip_rel_gap=mip_rel_gap, time_limit_s=time_limit_s,
                            extra_constraints=extra_constraints, solver=solver)
    info = replace(info, solve_s=time.perf_counter() - t0)
    if info.objective is None:
        return None, info
    return extract_choice(m), info
