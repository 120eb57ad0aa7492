"""The fleet as a grid resource: is the flexibility envelope honest, how tight, how fast?

Usage::

    cd bench && PYTHONPATH=.. python flexibility.py
        [--parts honesty,tightness,emerald,battery,timing]
        [--samples 5] [--points 20] [--hours 3] [--notice-h 2] [--data ../../shared/data]

Five parts, each printed with what it measured:

- ``honesty`` (seed3): the envelope of the default plan (:mod:`workbench.flexibility`),
  then ``--samples`` offers per site drawn at random (seed 0) among those with at least
  0.5 kW to shed, each planned as a grid event at its offered limit with its notice
  (:func:`workbench.runner.run_spec`, the look-ahead): kept or not, the largest import
  against the limit, new deadline misses, the offered against the measured extra cost.
  Each site's largest offer against its planned job load then (import less idle load and
  must-run services): the issue's "at least 30 %" figure.
- ``tightness`` (seed3): ``--points`` (site, start) points drawn at random (seed 1) among
  all offers; at each, the lowest import limit the hindsight plan (``offline``) keeps with
  no deadline miss its own run without the event meets, found by bisection (the floor
  first; then 5 halvings, about 3 % of the window's job load), against the envelope's
  offered limit: ``tightness = offered kW / hindsight kW`` (both below the look-ahead
  plan's peak import in the window).
- ``emerald`` (the battery's four-zone July scenario ``asia-eu-jul-burst``, built from
  ``--data`` as ``bench/battery.py`` builds it): Emerald AI's field-trial benchmark: the
  busiest site's 3-hour window of highest job load, announced 2 hours ahead, held 25 %
  of its peak job load below its planned peak import; the look-ahead's run with the event
  (kept? misses? extra cost) and the hindsight plan's with and without it.
- ``battery`` (the four-zone scenario, its busiest site given a battery of a quarter of
  its mean import for four hours, at 90 % round trip): the envelope of the look-ahead's
  plan with the battery against the same plan's offers without counting it (median and
  most kW per start hour at that site), then ``--samples`` of the battery's offers
  (at least 1 kW of it) planned as events: kept, new misses, offered and measured cost.
- ``timing``: the envelope's run time (every site x every start hour) beside the time of
  the plan it is read from, in the same process: seed3, the four-zone scenario and a
  50-site fleet of :func:`workbench.fleet.build_fleet` (2,000 jobs, 24 h at 15-min slots,
  planned by ``asap-home``: the envelope's time does not depend on the policy, and the
  look-ahead's time on that fleet is ``bench/fleet.py``'s).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.caps import Caps
from workbench.events import GridEvent
from workbench.flexibility import Envelope, offers
from workbench.model import Scenario
from workbench.runner import (
    RunSpec,
    fit_forecast,
    forecast_mode,
    grid_import_kw,
    run_spec,
    settle_events,
    simulate_spec,
)
from workbench.scenarios import build_seed3
from workbench.sim import RunResult
from workbench.sim.results import site_floors_kw

PARTS = ("honesty", "tightness", "emerald", "battery", "timing")
FOUR_ZONE = "asia-eu-jul-burst"


def _envelope(sc: Scenario, policy: str = "lookahead") -> tuple[Envelope, RunResult, float]:
    """The envelope of ``policy``'s plan of ``sc`` and the plan's wall time."""
    spec = RunSpec(sc.name, policy, baseline=False)
    t0 = time.perf_counter()
    res, _ = simulate_spec(spec, sc)
    wall = time.perf_counter() - t0
    return Envelope(sc, res.plan, res.slots, res.jobs, spec.sim.restart_s), res, wall


def _job_load(env: Envelope, d: str, a: int, b: int) -> tuple[float, float]:
    """The site's peak import and peak job load (import less its floor) in slots [a, b)."""
    j = env.names.index(d)
    p = env.import_kw[a:b, j]
    return float(p.max()), float((p - env.floor_kw[a:b, j]).max())


def honesty(args: argparse.Namespace) -> None:
    sc = build_seed3()
    env, _, plan_s = _envelope(sc)
    t0 = time.perf_counter()
    table = offers(env, args.hours, args.notice_h)
    print(f"seed3: plan {plan_s:.1f} s, {len(table)} offers in {time.perf_counter() - t0:.2f} s")
    for d, rows in table.groupby("datacenter", sort=False):
        best = rows.loc[rows["sheddable_kw"].idxmax()]
        a, b = env.window(d, sc.slot_of(pd.Timestamp(best["start"])), args.hours)
        _, load = _job_load(env, d, a, b)
        print(f"  {d}: largest offer {best['sheddable_kw']:.1f} kW at {best['start']}, "
              f"{100 * best['sheddable_kw'] / max(load, 1e-9):.0f}% of its planned job load "
              f"{load:.1f} kW then")
    pool = table[table["sheddable_kw"] >= 0.5]
    pick = pd.concat([rows.sample(min(args.samples, len(rows)), random_state=0)
                      for _, rows in pool.groupby("datacenter", sort=True)])
    rows = []
    for r in pick.itertuples():
        ev = GridEvent(r.datacenter, pd.Timestamp(r.start).to_pydatetime(), args.hours,
                       limit_kw=float(r.limit_kw), notice_hours=args.notice_h)
        out = run_spec(RunSpec(sc.name, baseline=False, caps=Caps(events=(ev,))), sc)
        g, = out.result.meta["grid_events"]
        rows.append({"site": r.datacenter, "start": r.start[5:16],
                     "offer_kw": round(r.sheddable_kw, 2), "limit_kw": round(r.limit_kw, 2),
                     "max_import_kw": round(g["max_import_kw"], 3), "met": g["met"],
                     "new_misses": len(g["new_misses"]),
                     "offered_cost": round(r.extra_cost, 2),
                     "measured_cost": round(g["extra_cost"], 2)})
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False))
    print(f"kept {int(frame['met'].sum())}/{len(frame)}, no new miss "
          f"{int((frame['new_misses'] == 0).sum())}/{len(frame)}")


def _keeps(sc: Scenario, twin: RunResult, ev: GridEvent, fitted: Any) -> dict[str, Any]:
    """The hindsight plan's run with ``ev``, settled against ``twin``."""
    caps = Caps(events=(ev,))
    res, _ = simulate_spec(RunSpec(sc.name, "offline", baseline=False, caps=caps), sc,
                           caps=caps, fitted=fitted)
    row, = settle_events(res, twin, sc, caps)
    return row


def _hindsight_limit(sc: Scenario, twin: RunResult, d: str, start: pd.Timestamp,
                     lo: float, hi: float, hours: float, notice_h: float, fitted: Any,
                     steps: int = 5) -> float:
    """The lowest limit in [lo, hi] the hindsight plan keeps with no new miss (bisection;
    ``hi`` when none below it is kept)."""
    def kept(limit: float) -> bool:
        ev = GridEvent(d, start.to_pydatetime(), hours, limit_kw=limit, notice_hours=notice_h)
        row = _keeps(sc, twin, ev, fitted)
        return bool(row["met"]) and not row["new_misses"]

    if kept(lo):
        return lo
    for _ in range(steps):
        mid = (lo + hi) / 2
        if kept(mid):
            hi = mid
        else:
            lo = mid
    return hi


def tightness(args: argparse.Namespace) -> None:
    sc = build_seed3()
    env, _, _ = _envelope(sc)
    table = offers(env, args.hours, args.notice_h)
    fitted = fit_forecast(sc, forecast_mode(RunSpec(sc.name, "offline"), sc))
    twin, _ = simulate_spec(RunSpec(sc.name, "offline", baseline=False), sc, fitted=fitted)
    pick = table.sample(min(args.points, len(table)), random_state=1)
    rows = []
    t0 = time.perf_counter()
    for i, r in enumerate(pick.itertuples(), 1):
        start = pd.Timestamp(r.start)
        a, b = env.window(r.datacenter, sc.slot_of(start), args.hours)
        j = env.names.index(r.datacenter)
        floor = float(env.floor_kw[a:b, j].max())
        peak = float(r.planned_import_kw)
        best = _hindsight_limit(sc, twin, r.datacenter, start, floor, peak, args.hours,
                                args.notice_h, fitted)
        rows.append({"site": r.datacenter, "start": r.start[5:16], "planned_kw": round(peak, 2),
                     "floor_kw": round(floor, 2), "offer_kw": round(r.sheddable_kw, 2),
                     "hindsight_kw": round(peak - best, 2),
                     "tightness": (r.sheddable_kw / (peak - best)) if peak - best > 0.05
                     else float("nan")})
        print(f"  point {i}/{len(pick)} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False))
    tight = frame["tightness"].dropna()
    print(f"tightness (offered / hindsight kW) over {len(tight)} points with anything to shed: "
          f"median {tight.median():.2f}, min {tight.min():.2f}; offered "
          f"{frame['offer_kw'].sum():.1f} kW of hindsight's "
          f"{frame['hindsight_kw'].sum():.1f} kW in all")


_BUILT: dict[str, Scenario] = {}


def _four_zone(data: Path, tmp: Path) -> Scenario:
    """The four-zone scenario, built once per run."""
    if FOUR_ZONE in _BUILT:
        return _BUILT[FOUR_ZONE]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from battery import build  # bench/battery.py's builder: the same scenario as its table

    _BUILT[FOUR_ZONE] = build(data, tmp, [FOUR_ZONE], tmp)[FOUR_ZONE]
    return _BUILT[FOUR_ZONE]


def emerald(args: argparse.Namespace, tmp: Path) -> None:
    sc = _four_zone(Path(args.data), tmp)
    env, res, _ = _envelope(sc)
    floors = site_floors_kw(sc)
    imp = grid_import_kw(res, sc)
    names = [d.name for d in sc.datacenters]
    load = imp - np.column_stack([floors[n] for n in names])
    busiest = names[int(np.argmax(load.mean(axis=0)))]
    j = names.index(busiest)
    n_win = env.window(busiest, 0, args.hours)[1]
    first = int(np.ceil(args.notice_h / env.slot_h))
    step = max(int(round(1.0 / env.slot_h)), 1)
    starts = range(first, sc.n_slots - n_win + 1, step)
    a = max(starts, key=lambda s: (load[s:s + n_win, j].mean(), -s))
    peak, job_peak = _job_load(env, busiest, a, a + n_win)
    limit = peak - 0.25 * job_peak
    start = pd.Timestamp(sc.slot_starts()[a])
    ev = GridEvent(busiest, start.to_pydatetime(), args.hours, limit_kw=limit,
                   notice_hours=args.notice_h)
    print(f"{FOUR_ZONE}: busiest site {busiest} (mean job load {load[:, j].mean():.1f} kW); "
          f"event {start:%Y-%m-%d %H:%M} UTC for {args.hours:g} h, {args.notice_h:g} h notice: "
          f"planned peak {peak:.1f} kW, peak job load {job_peak:.1f} kW, limit {limit:.1f} kW "
          f"(25 % of the job load shed)")
    _, free = simulate_spec(RunSpec(sc.name, "offline", baseline=False), sc)
    for policy in ("lookahead", "offline"):
        out = run_spec(RunSpec(sc.name, policy, baseline=False, caps=Caps(events=(ev,))), sc)
        g, = out.result.meta["grid_events"]
        m = out.result.metrics
        if out.bound is not None and free is not None:
            print(f"  the hindsight bound: {free.cost:.2f} {sc.currency} without the event, "
                  f"{out.bound.cost:.2f} with it ({out.bound.kind})")
        print(f"  {policy}: met {g['met']}, max import {g['max_import_kw']:.2f} kW against "
              f"{g['limit_kw']:.2f}, shed {g['shed_kwh']:.1f} kWh, new misses "
              f"{len(g['new_misses'])}, misses in all {m['deadline_misses']}, extra cost "
              f"{g['extra_cost']:.2f} {sc.currency} (the run's cost {m['cost']:.2f})")


def battery(args: argparse.Namespace, tmp: Path) -> None:
    import dataclasses

    from workbench.supply import Battery

    base = _four_zone(Path(args.data), tmp)
    env0, res0, _ = _envelope(base)
    names = [d.name for d in base.datacenters]
    imp = grid_import_kw(res0, base)
    busiest = names[int(np.argmax(imp.mean(axis=0)))]
    kw = 0.25 * float(imp[:, names.index(busiest)].mean())
    bat = Battery(f"{busiest}-bat", busiest, energy_kwh=4 * kw, power_kw=kw)
    sc = dataclasses.replace(base, supply=dataclasses.replace(
        base.supply, batteries=(*base.supply.batteries, bat)))
    env, res, _ = _envelope(sc)
    with_bat = offers(env, args.hours, args.notice_h, datacenters=[busiest])
    env.batteries = False
    without = offers(env, args.hours, args.notice_h, datacenters=[busiest])
    env.batteries = True
    print(f"{FOUR_ZONE}: a {bat.energy_kwh:.0f} kWh, {bat.power_kw:.1f} kW battery at "
          f"{busiest}; the look-ahead's cost {res.metrics['cost']:.2f} {sc.currency} "
          f"({res0.metrics['cost']:.2f} without it); {len(with_bat)} start hours")
    for label, t in (("with the battery", with_bat), ("jobs alone", without)):
        print(f"  {label}: sheddable median {t['sheddable_kw'].median():.1f} kW, most "
              f"{t['sheddable_kw'].max():.1f} kW, offers > 0.5 kW at "
              f"{int((t['sheddable_kw'] > 0.5).sum())} of {len(t)} hours")
    pool = with_bat[with_bat["battery_kw"] >= 1.0]
    rows = []
    for r in pool.sample(min(args.samples, len(pool)), random_state=0).itertuples():
        ev = GridEvent(busiest, pd.Timestamp(r.start).to_pydatetime(), args.hours,
                       limit_kw=float(r.limit_kw), notice_hours=args.notice_h)
        out = run_spec(RunSpec(sc.name, baseline=False, caps=Caps(events=(ev,))), sc)
        g, = out.result.meta["grid_events"]
        rows.append({"start": r.start[5:16], "offer_kw": round(r.sheddable_kw, 2),
                     "battery_kw": round(r.battery_kw, 2), "limit_kw": round(r.limit_kw, 2),
                     "max_import_kw": round(g["max_import_kw"], 3), "met": g["met"],
                     "new_misses": len(g["new_misses"]),
                     "offered_cost": round(r.extra_cost, 2),
                     "measured_cost": round(g["extra_cost"], 2)})
    frame = pd.DataFrame(rows)
    if len(frame):
        print(frame.to_string(index=False))
        print(f"kept {int(frame['met'].sum())}/{len(frame)}, no new miss "
              f"{int((frame['new_misses'] == 0).sum())}/{len(frame)}")


def timing(args: argparse.Namespace, tmp: Path) -> None:
    from workbench.fleet import build_fleet

    cases = [("seed3", build_seed3, "lookahead"),
             (FOUR_ZONE, lambda: _four_zone(Path(args.data), tmp), "lookahead"),
             ("fleet 50 x 2,000", lambda: build_fleet(args.data, n_datacenters=50,
                                                      active_jobs=2000, horizon_h=24.0),
              "asap-home")]
    for label, make, policy in cases:
        sc = make()
        env, _, plan_s = _envelope(sc, policy)
        t0 = time.perf_counter()
        table = offers(env, args.hours, args.notice_h)
        env_s = time.perf_counter() - t0
        print(f"  {label}: {len(sc.datacenters)} sites, {len(table)} offers in {env_s:.2f} s; "
              f"the {policy} plan {plan_s:.1f} s; ratio {env_s / plan_s:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--samples", type=int, default=5, help="offers per site (honesty)")
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--notice-h", type=float, default=2.0)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared"
                                          / "data"))
    args = ap.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = sorted(set(parts) - set(PARTS))
    if bad:
        sys.exit(f"--parts: unknown {bad}; choose from {', '.join(PARTS)}")
    with tempfile.TemporaryDirectory() as tmp:
        for part in parts:
            print(f"== {part}", flush=True)
            if part == "honesty":
                honesty(args)
            elif part == "tightness":
                tightness(args)
            elif part == "emerald":
                emerald(args, Path(tmp))
            elif part == "battery":
                battery(args, Path(tmp))
            else:
                timing(args, Path(tmp))


if __name__ == "__main__":
    main()
