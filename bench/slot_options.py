"""Slot options in arrays against the scalar slot model, in the same process.

Usage: ``python bench/slot_options.py [--repeat 5] [--copies 30] [--fleet 20x2000]
[--data ../shared/data]``

Two states, each timed with :func:`workbench.policies.base.slot_options` (the charges once
per job and site, the training options of all jobs at once) and with
:func:`~workbench.policies.options_scalar.slot_options_scalar` (one ``slot_outcome`` call per
option, the form every policy used before), after one warm-up call of each (the memos of batch grids
filled): ``seed3`` with its training jobs copied ``--copies`` times, half of them placed and
with random progress and gradient noise (seeded), and the first slot of a fleet of
:func:`workbench.fleet.build_fleet` (``DxJ``: sites and running jobs). Both forms must return
the same options bit for bit (checked here too). Prints CPU microseconds per option and the
ratio scalar / arrays; writes ``docs/results/slot_options.{csv,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from common import write_table

from workbench.policies.base import (
    JobState,
    Placement,
    SlotOptions,
    SlotState,
    slot_options,
)
from workbench.policies.options_scalar import slot_options_scalar
from workbench.scenarios import build_seed3

ROOT = Path(__file__).resolve().parent.parent


def _seed3_state(copies: int) -> tuple[SlotState, dict[str, float], dict[str, float]]:
    sc = build_seed3(0)
    rng = np.random.default_rng(0)
    states = []
    for c in range(copies):
        for j in (j for j in sc.jobs if j.is_training):
            job = dataclasses.replace(j, job_id=f"{j.job_id}~{c}")
            pools = [p for p in sc.pools if j.allows(p.gpu_type)]
            pool = pools[int(rng.integers(len(pools)))] if rng.random() < 0.5 else None
            place = None if pool is None else Placement(pool.datacenter, pool.gpu_type,
                                                        j.gpu_counts[0], j.batch_size)
            states.append(JobState(job=job, remaining=float(rng.uniform(0.01, 1.0)),
                                   placement=place,
                                   last_datacenter=None if place is None else place.datacenter,
                                   phi=float(rng.uniform(100.0, 5000.0))))
    t = 10
    state = SlotState(scenario=sc.view(), t=t, time=sc.slot_starts()[t], jobs=tuple(states))
    price = {r: float(sc.grid["price_per_kwh"].sel(region=r).values[t]) for r in sc.regions}
    carbon = {r: float(sc.grid["carbon_g_per_kwh"].sel(region=r).values[t]) for r in sc.regions}
    return state, price, carbon


def _fleet_state(data: str, size: str) -> tuple[SlotState, dict[str, float], dict[str, float]]:
    from workbench.fleet import build_fleet

    d, j = (int(x) for x in size.lower().split("x"))
    sc = build_fleet(data, n_datacenters=d, active_jobs=j, horizon_h=2.0)
    jobs = tuple(JobState(job=job, remaining=1.0, placement=None, last_datacenter=None,
                          phi=float(sc.profile(job.app, sc.pools[0].gpu_type).efficiency.phi(0.0)))
                 for job in sc.jobs if job.arrival <= sc.start)
    state = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=jobs)
    price = {r: float(sc.grid["price_per_kwh"].sel(region=r).values[0]) for r in sc.regions}
    carbon = {r: float(sc.grid["carbon_g_per_kwh"].sel(region=r).values[0]) for r in sc.regions}
    return state, price, carbon


def _time(f: Any, args: tuple[Any, ...], repeat: int) -> tuple[float, SlotOptions]:
    out = f(*args)
    c0 = time.process_time()
    for _ in range(repeat):
        out = f(*args)
    return (time.process_time() - c0) / repeat, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--copies", type=int, default=30)
    ap.add_argument("--fleet", default="20x2000")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args()
    cases = [(f"seed3, training jobs x{args.copies}", _seed3_state(args.copies))]
    if args.fleet:
        cases.append((f"fleet {args.fleet}, first slot", _fleet_state(args.data, args.fleet)))
    rows = []
    for what, (state, price, carbon) in cases:
        load = os.getloadavg()[0]
        arr_s, arr = _time(slot_options, (state, price, carbon), args.repeat)
        sca_s, sca = _time(slot_options_scalar, (state, price, carbon), args.repeat)
        same = all(np.array_equal(getattr(arr, f.name), getattr(sca, f.name))
                   for f in dataclasses.fields(SlotOptions) if f.name != "jobs")
        rows.append({"state": what, "jobs": len(state.jobs), "options": len(arr),
                     "scalar_us_per_option": round(sca_s / max(len(sca), 1) * 1e6, 1),
                     "arrays_us_per_option": round(arr_s / max(len(arr), 1) * 1e6, 1),
                     "scalar_s": round(sca_s, 3), "arrays_s": round(arr_s, 3),
                     "ratio_scalar_over_arrays": round(sca_s / arr_s, 2), "same_options": same,
                     "load_1min": round(load, 1)})
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    write_table(table, "slot_options", title="Slot options: arrays against the scalar model")


if __name__ == "__main__":
    main()
