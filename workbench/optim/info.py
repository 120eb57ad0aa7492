"""How one solve went: the record every solver path of the workbench returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SolveInfo:
    """How a policy's optimisation went in one slot (None for policies that solve nothing).

    ``status`` is the solver's own termination status; ``objective`` is set only when a
    solution was found; ``gap`` is the relative gap to the best bound, when known;
    ``fallback`` says the decision is the greedy feasible answer, ``message`` why.
    """

    status: str
    solve_s: float
    objective: float | None = None
    gap: float | None = None
    fallback: bool = False
    message: str = ""
