"""Speed and quality of the slot decision: the Pyomo reference against the fast paths.

Usage: ``python bench/slot_solver.py [--json] [--slots 3] [--sizes 50x3x5,...]``.

Synthetic slot instances (``synthetic_slot_problem`` of ``tests/helpers_policies.py``) of
``jobs x datacenters x configurations``; each size is solved for ``--slots`` successive
slots (the same options, weights moved by ~5%, as in a steady period). Paths:

``pyomo``      the reference: create_slot_model / solve_slot_model / extract_choice
``highs-mip``  the same MILP as arrays in highspy, cold, HiGHS MIP (mip_rel_gap 1e-3)
``lp-repair``  LP relaxation by column generation + greedy repair, cold
``auto``       lp-repair + neighbourhood polish (+ full MIP polish when small), cold
``auto-kept``  ``auto`` with one solver kept across the slots (LP restarts hot)

Timings are medians over the slots (build / solve / extract separately); the gap is
``(LP bound - objective) / |LP bound|``, the LP bound computed separately. ``--json`` prints
a list of objects with keys ``size``, ``path``, ``median_s``, ``gap`` (and the parts).
Writes ``docs/results/slot_solver.{csv,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from common import RESULTS, write_table  # noqa: E402

from workbench.optim import slot, slotpyomo  # noqa: E402
from workbench.optim.fastslot import FastSlotSolver  # noqa: E402
from workbench.optim.slotarrays import lp_bound, relative_gap  # noqa: E402

# The synthetic slot problems are test fixtures; they live with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers_policies import perturbed, synthetic_slot_problem  # noqa: E402

SIZES = ("50x3x5", "200x6x5", "1000x10x6", "5000x20x6")
PYOMO_MAX_OPTIONS = 100_000
"""Above this many options the Pyomo path is skipped (it takes minutes to build)."""


def pyomo_path(prob: slot.SlotProblem, time_limit_s: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    m = slotpyomo.create_slot_model(prob)
    t1 = time.perf_counter()
    info = slotpyomo.solve_slot_model(m, mip_rel_gap=1e-3, time_limit_s=time_limit_s)
    t2 = time.perf_counter()
    choice = slotpyomo.extract_choice(m) if info.objective is not None else None
    t3 = time.perf_counter()
    obj = float(prob.coef[choice].sum()) if choice is not None else None
    return {"build_s": t1 - t0, "solve_s": t2 - t1, "extract_s": t3 - t2, "objective": obj,
            "status": info.status}


def fast_path(solver: FastSlotSolver, prob: slot.SlotProblem,
              time_limit_s: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    choice, info = solver(prob, mip_rel_gap=1e-3, time_limit_s=time_limit_s)
    total = time.perf_counter() - t0
    rep = solver.last
    assert rep is not None
    ok = choice is not None and prob.is_feasible(choice)
    return {"build_s": rep.build_s, "solve_s": rep.solve_s,
            "extract_s": total - rep.build_s - rep.solve_s,
            "objective": info.objective if ok else None,
            "status": info.status if ok else (f"{info.status} (no solution)" if choice is None
                                              else f"{info.status} (infeasible choice)"),
            "hot": rep.hot_start}


def bench_size(size: str, n_slots: int, time_limit_s: float, seed: int) -> list[dict[str, Any]]:
    j, d, k = (int(v) for v in size.split("x"))
    base = synthetic_slot_problem(j, d, k, seed=seed)
    slots = [base] + [perturbed(base, seed=seed + 1000 + s) for s in range(1, n_slots)]
    bounds = [lp_bound(p) for p in slots]
    runs: dict[str, list[dict[str, Any]]] = {}
    if base.n_options <= PYOMO_MAX_OPTIONS:
        runs["pyomo"] = [pyomo_path(p, time_limit_s) for p in slots]
    runs["highs-mip"] = [fast_path(FastSlotSolver(method="mip", reuse=False), p, time_limit_s)
                         for p in slots]
    runs["lp-repair"] = [fast_path(FastSlotSolver(method="lp-repair", reuse=False), p,
                                   time_limit_s) for p in slots]
    runs["auto"] = [fast_path(FastSlotSolver(reuse=False), p, time_limit_s) for p in slots]
    kept = FastSlotSolver()
    runs["auto-kept"] = [fast_path(kept, p, time_limit_s) for p in slots]
    out = []
    for path, rs in runs.items():
        totals = [r["build_s"] + r["solve_s"] + r["extract_s"] for r in rs]
        gaps = [relative_gap(b, r["objective"]) if r["objective"] is not None else np.nan
                for b, r in zip(bounds, rs, strict=True)]
        out.append({
            "size": size, "options": base.n_options, "path": path,
            "median_s": statistics.median(totals),
            "build_s": statistics.median(r["build_s"] for r in rs),
            "solve_s": statistics.median(r["solve_s"] for r in rs),
            "extract_s": statistics.median(r["extract_s"] for r in rs),
            "gap": float(np.nanmax(gaps)) if not np.all(np.isnan(gaps)) else None,
            "status": ",".join(sorted({r["status"] for r in rs})),
            "note": "",
        })
    if "pyomo" not in runs:
        out.insert(0, {"size": size, "options": base.n_options, "path": "pyomo",
                       "median_s": None, "build_s": None, "solve_s": None, "extract_s": None,
                       "gap": None, "status": "skipped",
                       "note": f"skipped: over {PYOMO_MAX_OPTIONS} options the Pyomo build "
                               "alone takes minutes (issue: no solution in useful time)"})
    ref = next((r["median_s"] for r in out if r["path"] == "pyomo" and r["median_s"]), None)
    for r in out:
        r["vs_pyomo"] = r["median_s"] / ref if ref and r["median_s"] else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--slots", type=int, default=3, help="slots per size (median)")
    ap.add_argument("--time-limit", type=float, default=10.0, help="per-slot limit, s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-write", action="store_true", help="do not write docs/results")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for size in args.sizes.split(","):
        rows += bench_size(size, args.slots, args.time_limit, args.seed)
        if not args.json:
            print(pd.DataFrame([r for r in rows if r["size"] == size]).drop(
                columns=["note"]).to_string(index=False), flush=True)
    if args.json:
        print(json.dumps([{k: r[k] for k in ("size", "path", "median_s", "gap", "build_s",
                                             "solve_s", "extract_s", "vs_pyomo", "status",
                                             "note")} for r in rows]))
    if args.no_write:
        return
    table = pd.DataFrame(rows)
    notes = ["command: `python bench/slot_solver.py` (2-core machine; median of "
             f"{args.slots} slots, time limit {args.time_limit:g} s per slot)",
             "gap: (LP bound - objective) / |LP bound|, worst over the slots",
             "vs_pyomo: median time / the Pyomo path's median time at the same size"]
    notes += [f"{r['size']} {r['path']}: {r['note']}" for r in rows if r["note"]]
    write_table(table, "slot_solver", "Slot decision: Pyomo reference vs fast paths", notes)
    fig, ax = plt.subplots(figsize=(7, 4))
    for path in table.path.unique():
        t = table[(table.path == path) & table.median_s.notna()]
        ax.plot(t.options, t.median_s, marker="o", label=path)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("options (jobs x datacenters x configurations)")
    ax.set_ylabel("median decision time (s)")
    ax.axhline(10, color="grey", ls=":", lw=1)
    ax.legend()
    ax.set_title("Slot decision time")
    fig.tight_layout()
    fig.savefig(RESULTS / "slot_solver.png", dpi=120)


if __name__ == "__main__":
    main()
