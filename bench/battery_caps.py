"""Caps on the real-grid battery: do carbon budgets bind without backfiring, do power caps hold?

Usage::

    python bench/battery_caps.py [--data ../shared/data] [--only NAME,...] [--caps 5,10,20]
                                 [--power-share 0.8] [--policy lookahead]
                                 [--seed3 [--seed3-policies P,...]]

For each scenario of ``bench/battery.py`` (built the same way, the honest default forecast):
the policy (default: the product's default) uncapped, then with a fleet carbon budget of
``p`` % below that run's carbon for each ``p`` of ``--caps``::

    cap_kg = carbon_kg(uncapped) * (1 - p / 100)

beside the least carbon achievable with every deadline met (the hindsight LP bound of
:func:`workbench.runner.least_carbon`, the block LP minimising carbon). Per row: the capped
run's carbon, whether it stays at or below the uncapped run's (``no_backfire``), whether it
meets its cap, whether the bound says it can (``bound_says_feasible``), cost, misses.

With ``--seed3``: seed3 instead, each of ``--seed3-policies`` (default the look-ahead,
``threshold``, ``lyapunov`` and the hindsight plan replayed) uncapped and at each cap below
its own uncapped carbon; writes ``docs/results/battery_caps_seed3.{csv,md}``.

Then one run under a per-datacenter grid import cap: the site's idle load plus
``--power-share`` of what the uncapped run's peak metered import drew above it (the jobs'
part of the peak; never below what the idle load and the inference services alone draw: a
cap below that is refused before the run, :func:`workbench.sim.results.check_power_caps`):
``power_cap_violations`` must be 0; ``power_cap_trims`` counts the job-slots the simulator
paused to keep it. Writes ``docs/results/battery_caps.{csv,md}`` (not with ``--only``).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from battery import ROOT, build, default_policy, forecast_mode, scenarios
from common import write_table

from workbench import runner
from workbench.caps import Caps
from workbench.meter import idle_kw
from workbench.model import Scenario
from workbench.runner import RunSpec, simulate_spec
from workbench.scenarios import build_seed3
from workbench.schema import site_key
from workbench.sim import RunResult


def _run(sc: Scenario, policy: str, caps: Caps, fitted: Any) -> tuple[RunResult, float]:
    c0 = time.process_time()
    result, _ = simulate_spec(RunSpec(sc.name, policy, caps=caps, baseline=False), sc,
                              fitted=fitted)
    return result, time.process_time() - c0


def _peaks_kw(sc: Scenario, result: RunResult) -> dict[str, float]:
    """Each datacenter's peak grid import at the site meter over a run, kW."""
    return {d.name: float(result.slots[site_key("grid_import_kw", d.name)].max())
            for d in sc.datacenters}


def caps_rows(name: str, sc: Scenario, policy: str, pcts: list[float],
              power_share: float | None) -> list[dict[str, Any]]:
    """The rows of one scenario (module docstring); no power-cap row when ``power_share`` is
    None."""
    fitted = runner.fit_forecast(sc, forecast_mode(sc))
    free, cpu = _run(sc, policy, Caps(), fitted)
    c_free = float(free.metrics["carbon_kg"])
    least = runner.least_carbon(RunSpec(sc.name, policy), sc, Caps(carbon_kg=c_free))
    least_kg = math.nan if least is None else least.carbon_kg
    base = {"scenario": name, "policy": policy, "uncapped_carbon_kg": c_free,
            "uncapped_cost": float(free.metrics["cost"]), "least_carbon_kg": least_kg}
    rows = [{**base, "cap": "none", "cap_kg": math.nan, "carbon_kg": c_free,
             "cost": float(free.metrics["cost"]), "no_backfire": True, "cap_met": True,
             "bound_says_feasible": True,
             "deadline_misses": int(free.metrics["deadline_misses"]),
             "unfinished": int(free.metrics["jobs_unfinished"]),
             "power_cap_violations": 0, "power_cap_trims": 0, "cpu_s": cpu}]
    for p in pcts:
        cap = c_free * (1 - p / 100)
        res, cpu = _run(sc, policy, Caps(carbon_kg=cap), fitted)
        m = res.metrics
        rows.append({**base, "cap": f"{p:g}%", "cap_kg": cap, "carbon_kg": float(m["carbon_kg"]),
                     "cost": float(m["cost"]),
                     "cost_vs_uncapped": float(m["cost"]) / float(free.metrics["cost"]),
                     "no_backfire": float(m["carbon_kg"]) <= c_free * (1 + 1e-9),
                     "cap_met": bool(m.get("carbon_cap_met")),
                     "bound_says_feasible": bool(cap >= least_kg * (1 - 1e-9)),
                     "deadline_misses": int(m["deadline_misses"]),
                     "unfinished": int(m["jobs_unfinished"]),
                     "power_cap_violations": 0, "power_cap_trims": 0, "cpu_s": cpu})
        print(f"  {name:>20} cap {p:g}%: {cap:9.1f} kg -> {m['carbon_kg']:9.1f} kg "
              f"(uncapped {c_free:.1f}, least {least_kg:.1f}), cost {m['cost']:.2f}, "
              f"misses {m['deadline_misses']}", file=sys.stderr, flush=True)
    if power_share is None:
        return rows
    peaks = _peaks_kw(sc, free)
    # The jobs' part of the peak (above the site's idle load, which no plan can move) cut
    # to the share: a cap on the whole import would fall below the idle load where the
    # jobs add little to it.
    idle = dict(zip([d.name for d in sc.datacenters], idle_kw(sc).tolist(), strict=True))
    caps = Caps(power_kw_by_dc={d: idle[d] + power_share * max(kw - idle[d], 0.0) + 1e-3
                                for d, kw in peaks.items()})
    label = f"power {power_share:g} x peak above idle"
    try:
        res, cpu = _run(sc, policy, caps, fitted)
    except runner.SpecError as exc:
        rows.append({**base, "cap": label, "refused": str(exc)})
        print(f"  {name:>20} {label}: refused: {exc}", file=sys.stderr, flush=True)
        return rows
    m = res.metrics
    rows.append({**base, "cap": label, "cap_kg": math.nan, "carbon_kg": float(m["carbon_kg"]),
                 "cost": float(m["cost"]), "deadline_misses": int(m["deadline_misses"]),
                 "unfinished": int(m["jobs_unfinished"]),
                 "power_cap_violations": int(m["power_cap_violations"]),
                 "power_cap_trims": int(m["power_cap_trims"]), "cpu_s": cpu})
    print(f"  {name:>20} {label}: violations {m['power_cap_violations']}, trims "
          f"{m['power_cap_trims']}, cost {m['cost']:.2f}, misses {m['deadline_misses']}",
          file=sys.stderr, flush=True)
    return rows


def _verdict(table: pd.DataFrame) -> list[str]:
    carbon = table[table.cap.str.endswith("%")]
    power = table[table.cap.str.startswith("power")]
    backfire = carbon[~carbon.no_backfire.astype(bool)]
    missed = carbon[carbon.bound_says_feasible.astype(bool) & ~carbon.cap_met.astype(bool)]
    who = "policy" if table.policy.nunique() > 1 else "scenario"
    out = [f"carbon budgets: {len(carbon)} capped runs, {len(backfire)} emit more than the "
           "uncapped run" + ("" if backfire.empty else " (" + ", ".join(
               f"{getattr(r, who)} {r.cap}" for r in backfire.itertuples()) + ")"),
           f"cap missed where the least-carbon bound says it can be met: {len(missed)}"
           + ("" if missed.empty else " (" + ", ".join(
               f"{getattr(r, who)} {r.cap}: {r.carbon_kg:.1f} > {r.cap_kg:.1f} kg"
               for r in missed.itertuples()) + ")")]
    if "power_cap_violations" in power and len(power):
        ran = power[power.power_cap_violations.notna()]
        out.append(f"power caps: {len(ran)} runs, {int(ran.power_cap_violations.sum())} "
                   f"datacenter-slots over a cap, {int(ran.power_cap_trims.sum())} job-slots "
                   "trimmed" + (f"; {len(power) - len(ran)} refused before the run"
                                if len(power) > len(ran) else ""))
    return out


def seed3(policies: list[str], pcts: list[float]) -> None:
    """seed3 under each policy at each cap below its own uncapped carbon (``--seed3``)."""
    sc = build_seed3(0)
    t0, c0 = time.perf_counter(), time.process_time()
    rows: list[dict[str, Any]] = []
    for policy in policies:
        rows += caps_rows("seed3", sc, policy, pcts, None)
    table = pd.DataFrame(rows)
    verdict = _verdict(table)
    print(table.to_string(index=False))
    print("\n".join(verdict))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    write_table(table, "battery_caps_seed3", "Carbon caps on seed3, per policy", [
        f"command: `python bench/battery_caps.py --seed3 --caps "
        f"{','.join(f'{p:g}' for p in pcts)}`, {wall:.0f} s wall, {cpu:.0f} s CPU on the "
        "shared 2-core machine",
        "cap_kg = the policy's uncapped carbon x (1 - p/100); least_carbon_kg: the least "
        "carbon with every deadline met (hindsight LP bound)", *verdict])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--caps", default="5,10,20", help="percentages below the uncapped carbon")
    ap.add_argument("--power-share", type=float, default=0.8,
                    help="power cap per datacenter as a share of its uncapped peak")
    ap.add_argument("--policy", default="", help="default: the product's default policy")
    ap.add_argument("--seed3", action="store_true", help="seed3 under several policies")
    ap.add_argument("--seed3-policies", default="lookahead,threshold,lyapunov,offline")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.seed3:
        seed3(args.seed3_policies.split(","), [float(p) for p in args.caps.split(",") if p])
        return
    args.data = args.data.resolve()
    specs = scenarios()
    names = args.only.split(",") if args.only else list(specs)
    unknown = sorted(set(names) - set(specs))
    if unknown:
        sys.exit(f"unknown scenarios {unknown}; choose from {', '.join(specs)}")
    pcts = [float(p) for p in args.caps.split(",") if p.strip()]
    policy = args.policy or default_policy()
    tmp = Path(tempfile.mkdtemp(prefix="wb-battery-caps-"))
    t0, c0 = time.perf_counter(), time.process_time()
    built = build(args.data, tmp, names, tmp)
    rows: list[dict[str, Any]] = []
    for n in names:
        rows += caps_rows(n, built[n], policy, pcts, args.power_share)
    table = pd.DataFrame(rows)
    verdict = _verdict(table)
    print(table.to_string(index=False))
    print("\n".join(verdict))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"battery caps: {len(names)} scenarios, {wall:.0f} s wall, {cpu:.0f} s CPU",
          file=sys.stderr)
    if args.only:
        return
    write_table(table, "battery_caps", f"Caps on the real-grid battery: {policy}", [
        f"command: `python bench/battery_caps.py --caps {args.caps} --power-share "
        f"{args.power_share:g}`, {len(names)} scenarios, {wall:.0f} s wall, {cpu:.0f} s CPU "
        "(scenario builds included) on the shared 2-core machine",
        "cap_kg = uncapped carbon x (1 - p/100); least_carbon_kg: the least carbon with every "
        "deadline met (hindsight LP bound); cpu_s: the run's CPU seconds", *verdict])


if __name__ == "__main__":
    main()
