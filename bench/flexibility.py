"""Is the flexibility envelope honest? Offers planned as grid events with the look-ahead.

Usage::

    python bench/flexibility.py [--samples 12] [--hours 3] [--notice-h 2]

On seed3: the envelope of the default plan (:mod:`workbench.flexibility`; the time of the
plan run and of the offers printed apart), then ``--samples`` offers drawn at random (seed
0) among those with at least 0.5 kW to shed, each planned as a grid event at its offered
limit with its notice (:func:`workbench.runner.run_spec`): kept or not, the largest import
against the limit, new deadline misses, the offered against the measured extra cost.
Prints each site's largest offer against its planned job load then (import less idle load
and must-run services), the issue's "at least 30 %" figure.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from workbench.caps import Caps
from workbench.events import GridEvent
from workbench.flexibility import Envelope, offers
from workbench.runner import RunSpec, run_spec, simulate_spec
from workbench.scenarios import build_seed3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--notice-h", type=float, default=2.0)
    args = ap.parse_args()
    sc = build_seed3()
    spec = RunSpec(sc.name, baseline=False)
    t0 = time.perf_counter()
    res, _ = simulate_spec(spec, sc)
    t1 = time.perf_counter()
    env = Envelope(sc, res.plan, res.slots, res.jobs, spec.sim.restart_s)
    table = offers(env, args.hours, args.notice_h)
    t2 = time.perf_counter()
    print(f"seed3: plan run {t1 - t0:.1f} s, {len(table)} offers in {t2 - t1:.2f} s "
          f"(ratio {(t2 - t1) / (t1 - t0):.3f} of the plan run)")
    for d, rows in table.groupby("datacenter", sort=False):
        best = rows.loc[rows["sheddable_kw"].idxmax()]
        s = sc.slot_of(pd.Timestamp(best["start"]))
        j = env.names.index(d)
        floor = float(env.floor_kw[s:s + 12, j].max())
        load = best["planned_import_kw"] - floor
        print(f"  {d}: largest offer {best['sheddable_kw']:.1f} kW at {best['start']}, "
              f"{100 * best['sheddable_kw'] / max(load, 1e-9):.0f}% of its planned job load "
              f"{load:.1f} kW then")
    pool = table[table["sheddable_kw"] >= 0.5]
    pick = pool.sample(min(args.samples, len(pool)), random_state=0)
    kept = no_miss = 0
    rows = []
    for r in pick.itertuples():
        ev = GridEvent(r.datacenter, pd.Timestamp(r.start).to_pydatetime(), args.hours,
                       limit_kw=float(r.limit_kw), notice_hours=args.notice_h)
        out = run_spec(RunSpec(sc.name, baseline=False, caps=Caps(events=(ev,))), sc)
        g, = out.result.meta["grid_events"]
        kept += bool(g["met"])
        no_miss += not g["new_misses"]
        rows.append({"site": r.datacenter, "start": r.start[5:16], "offer_kw":
                     round(r.sheddable_kw, 2), "limit_kw": round(r.limit_kw, 2),
                     "max_import_kw": round(g["max_import_kw"], 2), "met": g["met"],
                     "new_misses": len(g["new_misses"]),
                     "offered_cost": round(r.extra_cost, 2),
                     "measured_cost": round(g["extra_cost"], 2)})
    print(pd.DataFrame(rows).to_string(index=False))
    print(f"kept {kept}/{len(rows)}, no new miss {no_miss}/{len(rows)}")


if __name__ == "__main__":
    main()
