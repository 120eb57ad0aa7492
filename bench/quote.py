"""Speed of :func:`workbench.quote.quote` against the quote of an earlier commit, in one process.

Usage: ``python bench/quote.py [--before REV] [--repeat 5] [--json]`` from the repository
root (``PYTHONPATH=$PWD``).

The earlier quote (``workbench/quote.py`` at ``REV``, default :data:`BEFORE`: the last
commit whose quote kept its own whole-job model) is loaded from git as a module beside the
current one, and both price the same job specs on the built-in ``seed3`` scenario with its
honest default forecast. Per spec: the median wall time of ``--repeat`` calls of each
(alternated), the
ratio ``now / before``, and the recommended option of each (configuration, hours, kWh,
cost, kg CO2), so that a change of numbers is seen beside the change of speed. ``now`` runs
with :mod:`workbench.outcome`'s memos (batch grids, best batches) as a long-lived process
keeps them; ``cold`` empties them before each call (a fresh process's first quote). ``--json``
prints the rows as a list of objects. Writes ``docs/results/quote.{csv,md}``.

Specs: ``default`` is ``workbench quote seed3 --app cifar10 --work 1.72e8 --home guangzhou``
(the CLI's defaults: 1-8 GPUs, no deadline; 1.72e8 is the median cifar10 job of seed3, the
app's default work); ``deadline24`` the same with the app's default 24 h deadline;
``long`` an imagenet job of 1e8 samples (4x seed3's median) with a 24 h deadline, whose few-GPU
options need days (the worst case: runs longer than the deadline are still simulated to the
horizon's end, so that "start now" is priced); ``beyond`` 1e9 imagenet samples without a
deadline, whose runs on up to 4 GPUs do not fit in the week's horizon at all.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
from common import write_table

from workbench import outcome
from workbench.scenarios import build_seed3

now = importlib.import_module("workbench.quote")  # the package exports the function quote

BEFORE = "d0478cf"
"""The commit before the quote predicted through :mod:`workbench.outcome`."""

SPECS: dict[str, dict[str, Any]] = {
    "default": {"app": "cifar10", "work_samples": 1.72e8, "home": "guangzhou"},
    "deadline24": {"app": "cifar10", "work_samples": 1.72e8, "home": "guangzhou",
                   "deadline_h": 24.0},
    "long": {"app": "imagenet", "work_samples": 1e8, "home": "guangzhou", "deadline_h": 24.0},
    "beyond": {"app": "imagenet", "work_samples": 1e9, "home": "guangzhou"},
}


def load_before(rev: str) -> ModuleType:
    """``workbench/quote.py`` at ``rev`` as the module ``workbench._quote_before``."""
    root = Path(__file__).resolve().parent.parent
    src = subprocess.run(["git", "show", f"{rev}:workbench/quote.py"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("workbench._quote_before", loader=None)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    exec(compile(src, f"{rev}:workbench/quote.py", "exec"), mod.__dict__)  # noqa: S102
    return mod


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _clear_outcome_memos() -> None:
    """Empty :mod:`workbench.outcome`'s memos (batch grids, best batches), as in a fresh
    process: the cold case."""
    outcome.clear_memos()


def _best(q: Any) -> dict[str, Any]:
    b = q.recommended
    if b is None:
        return {"best": "none", "hours": None, "kwh": None, "cost": None, "kg": None}
    return {"best": f"{b['datacenter']} {b['n_gpus']}x{b['gpu_type']}",
            "hours": b["duration_h"], "kwh": b["energy_kwh"], "cost": b["cost"],
            "kg": b["carbon_kg"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=BEFORE, help=f"git revision (default {BEFORE})")
    ap.add_argument("--repeat", type=int, default=15, help="calls per spec (default 15)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    old = load_before(args.before)
    sc = build_seed3(seed=0)
    rows = []
    for name, kw in SPECS.items():
        # One warm-up call each (memos, the forecast's first build), then the timed calls.
        old.quote(sc, old.JobSpec(**kw))
        now.quote(sc, now.JobSpec(**kw))
        # Alternated, so that a change of load on a shared machine hits both alike.
        before, after, cold = [], [], []
        for _ in range(args.repeat):
            dt, q_old = _timed(lambda kw=kw: old.quote(sc, old.JobSpec(**kw)))
            before.append(dt)
            dt, q_now = _timed(lambda kw=kw: now.quote(sc, now.JobSpec(**kw)))
            after.append(dt)
            _clear_outcome_memos()
            dt, _ = _timed(lambda kw=kw: now.quote(sc, now.JobSpec(**kw)))
            cold.append(dt)
        t_old, t_now = statistics.median(before), statistics.median(after)
        t_cold = statistics.median(cold)
        row = {"spec": name, "options": len(q_now.options), "before_s": t_old, "now_s": t_now,
               "ratio_now_over_before": t_now / t_old, "now_cold_s": t_cold,
               "ratio_cold_over_before": t_cold / t_old}
        row.update({f"{k}_before": v for k, v in _best(q_old).items()})
        row.update({f"{k}_now": v for k, v in _best(q_now).items()})
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['spec']:<11} {r['options']:>3} options  before {r['before_s']*1e3:7.1f} ms"
                  f"  now {r['now_s']*1e3:7.1f} ms (cold {r['now_cold_s']*1e3:7.1f} ms)  "
                  f"ratio now/before {r['ratio_now_over_before']:.2f} "
                  f"(cold {r['ratio_cold_over_before']:.2f})")
            for when in ("before", "now"):
                if r[f"hours_{when}"] is None:
                    print(f"    {when:<6} no option meets the deadline")
                    continue
                print(f"    {when:<6} {r[f'best_{when}']:<20} {r[f'hours_{when}']:6.2f} h "
                      f"{r[f'kwh_{when}']:7.2f} kWh {r[f'cost_{when}']:7.3f} {sc.currency} "
                      f"{r[f'kg_{when}']:7.3f} kg CO2")
    write_table(pd.DataFrame(rows), "quote", "Quote: speed against the quote before it "
                "predicted through workbench.outcome, and the recommended option of each",
                notes=[f"`python bench/quote.py --before {args.before} --repeat "
                       f"{args.repeat}` on seed3 (median of {args.repeat} calls; one process)",
                       "ratio_now_over_before < 1 is faster now; cold: outcome's memos "
                       "emptied before each call"])


if __name__ == "__main__":
    main()
