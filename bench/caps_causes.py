"""Why a capped look-ahead misses its cap: the least carbon it reaches at all, beside the bound.

Usage::

    python bench/caps_causes.py [--data ../shared/data] [--only NAME,...]

Default scenarios: ``us3-jan-burst``, ``asia-eu-jan-burst``, ``six-zone-jul`` (built as
``bench/battery.py`` builds them) and ``seed3``. For each:

- ``uncapped``: the default look-ahead with the honest default forecast;
- ``bound``: the least carbon with every deadline met
  (:func:`workbench.policies.offline.least_carbon_bound`: the hindsight LP on the true
  carbon, each job's share due within the horizon, fractional slots, no restarts or
  transfers);
- ``floor``: the least carbon the look-ahead reaches at all
  (:func:`workbench.runner.floor_run`: a budget of 1 g, never kept, so every window plans
  under its budget needs, and an internal carbon price of 1e6 per kg, carbon before cost
  in the window LP and the slot), on the truth with the honest forecast and, as a what-if,
  the perfect one (``floor_perfect``). ``forecast_kg = floor - floor_perfect``. A capped
  ``plan`` tells the same floor before the run on what is known then
  (:func:`workbench.runner.carbon_floor`).

The gap ``floor - bound`` is split job by job (run: work ``w_j``, kg ``g_j``, kWh ``E_j``;
bound: ``b_j``, ``g*_j``, ``E*_j``; the run scaled to the bound's work ``b_j / w_j``)::

    extra_work_kg = sum_j g_j (1 - b_j / w_j)                    work beyond the bound's
    energy_kg     = sum_j (E_j b_j / w_j - E*_j) g*_j / E*_j       more kWh for that work
    intensity_kg  = sum_j E_j b_j / w_j (g_j / E_j - g*_j / E*_j)  dirtier kWh
    services_kg   = the inference services' difference

``extra_work`` is mostly work done within the horizon beyond the share due in it (whole
slots where the bound runs fractions of one, jobs finished rather than paced); ``energy``
the restarts, transfers and configurations (``restart_kwh`` the energy of the seconds lost
to restarts and transfers, part of it); ``intensity`` when and where (forecast, the window,
contention, whole slots). Writes ``docs/results/caps_causes.{csv,md}`` (not with
``--only``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from battery import ROOT, build, forecast_mode, scenarios
from common import write_table

from workbench import runner
from workbench.caps import Caps
from workbench.model import Scenario
from workbench.policies.offline import LeastCarbon, least_carbon_bound
from workbench.runner import ForecastSettings, RunSpec, floor_run, simulate_spec
from workbench.scenarios import build_seed3
from workbench.sim import RunResult

DEFAULT = ("us3-jan-burst", "asia-eu-jan-burst", "six-zone-jul", "seed3")


def _run(sc: Scenario, mode: str | None, *, floor: bool = False) -> RunResult:
    """The look-ahead uncapped, or its floor (:func:`workbench.runner.floor_run`)."""
    spec = RunSpec(sc.name, "lookahead", baseline=False, forecast=ForecastSettings(mode=mode))
    fitted = runner.fit_forecast(sc, runner.forecast_mode(spec, sc))
    if floor:
        return floor_run(spec, sc, Caps(), fitted=fitted)
    result, _ = simulate_spec(spec, sc, fitted=fitted)
    return result


def gap_parts(sc: Scenario, run: RunResult, bound: LeastCarbon) -> dict[str, float]:
    """The gap ``run - bound`` split job by job (module docstring), kg."""
    jobs = run.jobs.set_index("job_id")
    out = dict.fromkeys(("extra_work_kg", "energy_kg", "intensity_kg", "services_kg"), 0.0)
    for job in sc.jobs:
        b_w, b_kg, b_kwh = bound.per_job.get(job.job_id, (0.0, 0.0, 0.0))
        row = jobs.loc[job.job_id]
        kg, kwh = float(row.carbon_kg), float(row.energy_kwh)
        if not job.is_training:
            out["services_kg"] += kg - b_kg
            continue
        w = 1.0 - float(row.remaining)
        f = b_w / w if w > 1e-12 else 0.0
        out["extra_work_kg"] += kg * (1.0 - f)
        g_per_kwh = b_kg / b_kwh if b_kwh > 1e-12 else 0.0
        out["energy_kg"] += (kwh * f - b_kwh) * g_per_kwh
        out["intensity_kg"] += kwh * f * ((kg / kwh if kwh > 1e-12 else 0.0) - g_per_kwh)
    return out


def causes_row(name: str, sc: Scenario) -> dict[str, Any]:
    """One scenario's row (module docstring)."""
    c0 = time.process_time()
    free = _run(sc, None)
    # The bound with the runs' GPU power-limit menu (a bound of what they may choose).
    bound = least_carbon_bound(sc, power_limits=RunSpec(sc.name).power_limits)
    floor = _run(sc, None, floor=True)
    perfect = _run(sc, "perfect", floor=True)
    row: dict[str, Any] = {
        "scenario": name, "forecast": forecast_mode(sc),
        "uncapped_kg": float(free.metrics["carbon_kg"]), "uncapped_cost": free.metrics["cost"],
        "bound_kg": bound.carbon_kg, "floor_kg": float(floor.metrics["carbon_kg"]),
        "floor_cost": floor.metrics["cost"],
        "floor_perfect_kg": float(perfect.metrics["carbon_kg"]),
        "floor_perfect_cost": perfect.metrics["cost"]}
    row["forecast_kg"] = row["floor_kg"] - row["floor_perfect_kg"]
    for tag, run in (("perfect", perfect), ("honest", floor)):
        parts = gap_parts(sc, run, bound)
        row.update({f"{tag}_{k}": v for k, v in parts.items()})
        plan = run.plan
        lost_kwh = float((plan.energy_kwh * plan.lost_s.clip(upper=sc.slot_s) / sc.slot_s).sum())
        row[f"{tag}_restart_kwh"] = lost_kwh
    row["misses"] = f"{free.metrics['deadline_misses']}/{floor.metrics['deadline_misses']}/" \
        f"{perfect.metrics['deadline_misses']}"
    row["cpu_s"] = time.process_time() - c0
    print(f"  {name:>20}: uncapped {row['uncapped_kg']:.1f}, floor {row['floor_kg']:.1f} "
          f"(perfect {row['floor_perfect_kg']:.1f}), bound {row['bound_kg']:.1f} kg",
          file=sys.stderr, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--only", default="", help="comma-separated scenario names (and seed3)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    names = args.only.split(",") if args.only else list(DEFAULT)
    specs = scenarios()
    unknown = sorted(set(names) - set(specs) - {"seed3"})
    if unknown:
        sys.exit(f"unknown scenarios {unknown}; choose from seed3, {', '.join(specs)}")
    tmp = Path(tempfile.mkdtemp(prefix="wb-caps-causes-"))
    t0, c0 = time.perf_counter(), time.process_time()
    grid = [n for n in names if n != "seed3"]
    built = build(args.data.resolve(), tmp, grid, tmp) if grid else {}
    rows = [causes_row(n, build_seed3(0) if n == "seed3" else built[n]) for n in names]
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"caps causes: {len(names)} scenarios, {wall:.0f} s wall, {cpu:.0f} s CPU",
          file=sys.stderr)
    if args.only:
        return
    write_table(table, "caps_causes", "Why capped look-ahead runs miss their caps", [
        f"command: `python bench/caps_causes.py`, {wall:.0f} s wall, {cpu:.0f} s CPU on the "
        "shared 2-core machine",
        "floor: the look-ahead with a 1 g budget and a carbon price of 1e6 per kg (the least "
        "carbon it reaches); floor_perfect: the same with the perfect forecast (a what-if); "
        "bound: the hindsight least-carbon LP",
        "gap floor - bound split job by job: extra_work (work beyond the bound's), energy "
        "(more kWh for the same work: restarts, transfers, configurations), intensity "
        "(dirtier kWh: when and where), services; restart_kwh: energy of the seconds lost to "
        "restarts and transfers; misses: uncapped/floor/floor_perfect"])


if __name__ == "__main__":
    main()
