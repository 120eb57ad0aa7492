"""The look-ahead's window LP solved two ways in the same process: warm-started against cold,
or without HiGHS's presolve against with it.

Usage::

    python bench/window_lp.py [--compare warm|presolve] [--philly-days 1] [--philly-offset 25]
                              [--slots N] [--seed3-copies 8] [--data ../shared/data]
                              [--out NAME]

``--compare warm`` (default): the default policy (``lookahead``) with ``warm_start=True``
plans the scenario; at every re-plan the window LP it builds is solved twice: warm (from the
previous plan's basis mapped by job, pool, GPU count and block,
:func:`workbench.optim.blocklp.warm_basis`: what the policy uses) and cold (the same LP from
scratch). ``--compare presolve``: the default policy (presolve off) plans the scenario; each
window LP is solved as the policy does (the "new" side) and again with HiGHS's presolve on
(the "old" side, what the policy did before). Reported per re-plan: columns, CPU seconds and
simplex iterations of each, and the relative difference of their optima (the same LP: it
must be ~1e-9; the vertex, the plan, may differ). The ratio printed is
``sum(old CPU s) / sum(new CPU s)`` over the re-plans, and the same for iterations.

Scenarios: ``--philly-days D`` the Philly window of ``bench/philly.py`` (four real-grid
datacenters, 1,024 GPUs, 15-minute slots; built in a scratch store); otherwise the built-in
``seed3`` over 2 days with its first day's training jobs copied ``--seed3-copies`` times.
``--slots N`` stops after the first ``N`` slots (the scenario is cut to them plus a day, so
that each window is a whole day). Writes ``docs/results/window_lp{,_NAME}.{csv,md}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from common import write_table

from workbench import runner
from workbench.optim import blocklp
from workbench.scenarios import build_seed3, first_hours

ROOT = Path(__file__).resolve().parent.parent


def _seed3(copies: int) -> Any:
    sc = build_seed3(0)
    train = [j for j in sc.jobs if j.is_training]
    other = [j for j in sc.jobs if not j.is_training]
    jobs = other + [replace(j, job_id=f"{j.job_id}~{k}") if k else j
                    for k in range(copies) for j in train]
    sc = replace(sc, jobs=tuple(sorted(jobs, key=lambda j: (j.arrival, j.job_id))))
    return first_hours(sc, 48, arrivals_h=24)


def _solve_both(rows: list[dict[str, Any]], compare: str) -> Any:
    """A stand-in for ``blocklp.solve_block_problem`` that also solves each LP the old way:
    cold (``compare`` "warm") or with presolve on ("presolve")."""
    real = blocklp.solve_block_problem
    old_way = ({"warm": None, "keep_basis": False} if compare == "warm"
               else {"presolve": True})

    def both(prob: blocklp.BlockProblem, **kw: Any) -> blocklp.BlockSolution:
        c0 = time.process_time()
        warm = real(prob, **kw)
        c1 = time.process_time()
        cold = real(prob, **{**kw, **old_way})
        c2 = time.process_time()
        obj_w = float(prob.cost @ warm.x) if warm.complete else np.nan
        obj_c = float(prob.cost @ cold.x) if cold.complete else np.nan
        full_w = _objective(prob, warm)
        full_c = _objective(prob, cold)
        rows.append({
            "replan": len(rows), "columns": warm.n_columns, "x_columns": prob.n_x,
            "warm": warm.warm if compare == "warm" else True,
            "warm_cpu_s": c1 - c0, "cold_cpu_s": c2 - c1,
            "warm_iterations": warm.iterations, "cold_iterations": cold.iterations,
            "objective_rel_diff": abs(full_w - full_c) / max(abs(full_c), 1e-12),
            "energy_cost_warm": obj_w, "energy_cost_cold": obj_c,
            "status": f"{warm.status}/{cold.status}"})
        return warm

    return both


def _objective(prob: blocklp.BlockProblem, sol: blocklp.BlockSolution) -> float:
    """The LP's objective from its named parts (``c x + M m + w short + w s``)."""
    if not sol.complete:
        return float("nan")
    move = 0.0 if prob.moves is None else float(prob.moves.cost @ sol.move)
    return float(prob.cost @ sol.x + move + prob.shortfall_weight * sol.short.sum()
                 + prob.carbon_slack_weight * sol.slack_kg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", choices=("warm", "presolve"), default="warm")
    ap.add_argument("--philly-days", type=float, default=0.0)
    ap.add_argument("--philly-offset", type=float, default=25.0)
    ap.add_argument("--seed3-copies", type=int, default=8)
    ap.add_argument("--slots", type=int, default=0)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wb-wlp-") as tmp:
        if args.philly_days > 0:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from philly import build_philly

            sc = build_philly(str(Path(tmp) / "p.duckdb"), args.data, args.philly_days,
                              args.philly_offset)
            what = f"philly {args.philly_days:g} days from day {args.philly_offset:g}"
        else:
            sc = _seed3(args.seed3_copies)
            what = f"seed3 2 days, training jobs x{args.seed3_copies}"
        if args.slots:
            sc = first_hours(sc, (args.slots * sc.slot_s) / 3600 + 24)
        fitted = runner.fit_forecast(sc, runner.forecast_mode(runner.RunSpec(sc.name), sc))
        rows: list[dict[str, Any]] = []
        blocklp_solve = blocklp.solve_block_problem
        blocklp.solve_block_problem = _solve_both(rows, args.compare)  # type: ignore[assignment]
        try:
            knobs = {"warm_start": True} if args.compare == "warm" else {}
            spec = runner.RunSpec(sc.name, "lookahead", knobs=knobs, baseline=False)
            runner.simulate_spec(spec, sc, fitted=fitted)
        finally:
            blocklp.solve_block_problem = blocklp_solve  # type: ignore[assignment]
    table = pd.DataFrame(rows)
    warm = table[table["warm"]]
    ratio = warm["cold_cpu_s"].sum() / max(warm["warm_cpu_s"].sum(), 1e-12)
    it_ratio = warm["cold_iterations"].sum() / max(warm["warm_iterations"].sum(), 1)
    print(table.to_string(index=False))
    new, old = (("warm", "cold") if args.compare == "warm"
                else ("presolve off", "presolve on"))
    print(f"{what}: {len(table)} re-plans ({len(warm)} compared); {old} / {new} CPU s "
          f"{warm['cold_cpu_s'].sum():.2f} / {warm['warm_cpu_s'].sum():.2f} = {ratio:.2f}x; "
          f"iterations {it_ratio:.2f}x; largest relative objective difference "
          f"{table['objective_rel_diff'].max():.2e}")
    summary = pd.DataFrame([{
        "scenario": what, "compare": f"{old} / {new}", "replans": len(table),
        "compared": len(warm),
        "x_columns_mean": round(float(table["x_columns"].mean()), 0),
        "old_cpu_s": round(float(warm["cold_cpu_s"].sum()), 2),
        "new_cpu_s": round(float(warm["warm_cpu_s"].sum()), 2),
        "cpu_ratio_old_over_new": round(float(ratio), 2),
        "iterations_ratio": round(float(it_ratio), 2),
        "max_objective_rel_diff": float(table["objective_rel_diff"].max())}])
    name = "window_lp" + (f"_{args.out}" if args.out else "")
    write_table(summary, name, title=f"Window LP: {new} against {old}")


if __name__ == "__main__":
    main()
