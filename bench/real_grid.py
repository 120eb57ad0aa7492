"""The seed-headline table on a scenario built from real public data (``examples/real_grid.toml``).

Usage: ``python bench/real_grid.py [--data ../shared/data] [--db /tmp/real_grid.duckdb]``.

Imports, into a scratch store outside the repository, the 2023 hourly prices (USD/MWh,
converted to USD/kWh by the importer) and carbon intensity of four SustainCluster zones
(US-CAL-CISO, US-TEX-ERCO, US-MIDA-PJM, DE-LU), the Pollux workload 6 job trace, and builds
``real4`` (network latency from the GCP latency matrix); then runs every policy as in
``bench/seed_headline.py``. Writes ``docs/results/real_grid.{csv,md,png}``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import pandas as pd
from common import (
    POLICY_COLUMNS,
    cost_carbon_bars,
    policy_row,
    run_policy,
    write_table,
)

from workbench import runner
from workbench.cli import main as cli
from workbench.policies import POLICY_NAMES, unsuitable
from workbench.store import Store

ROOT = Path(__file__).resolve().parent.parent
ZONES = ("US-CAL-CISO", "US-TEX-ERCO", "US-MIDA-PJM", "DE-LU")


def build(data: Path, db: Path) -> None:
    sc = data / "grid" / "sustain-cluster"
    for z in ZONES:
        for argv in (
            ["import", "grid", "electricitymaps-csv",
             str(sc / "carbon" / z / f"{z}_2023_hourly.csv"), "--region", z],
            ["import", "grid", "price-csv",
             str(sc / "prices" / z / f"{z}_electricity_prices_2023.csv"), "--region", z],
        ):
            if cli(["--db", str(db), *argv]) != 0:
                sys.exit(f"import failed: {' '.join(argv)}")
    wl = data / "jobs" / "pollux" / "workloads" / "workload-6.csv"
    if cli(["--db", str(db), "import", "jobs", "pollux-workload", str(wl), "--into",
            "pollux-w6", "--replace"]) != 0:
        sys.exit("job import failed")
    # The shipped example, its latency matrix read from --data (not only ../shared/data).
    cfg = (ROOT / "examples" / "real_grid.toml").read_text().replace(
        "../../shared/data", str(data.resolve()))
    config = db.parent / "real_grid.toml"
    config.write_text(cfg)
    if cli(["--db", str(db), "scenario", "build", "real4", "--config", str(config)]) != 0:
        sys.exit("scenario build failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--db", type=Path, default=None, help="scratch store (default: a temp file)")
    ap.add_argument("--policies", default=",".join(POLICY_NAMES))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not args.data.is_dir():
        sys.exit(f"no real data at {args.data}; pass --data DIR")
    db = args.db or Path(tempfile.mkdtemp(prefix="wb-real-")) / "real.duckdb"
    build(args.data, db)
    with Store(db) as store:
        sc = store.load_scenario("real4")
    # A policy that refuses the scenario (follow-renewables without own supply) is left out.
    order = ["asap-home"] + [p for p in args.policies.split(",")
                             if p != "asap-home" and unsuitable(p, sc) is None]
    rows, base, bound, base_result, forecast = [], None, None, None, ""
    fitted = runner.fit_forecast(sc, runner.forecast_mode(runner.RunSpec(sc.name), sc))
    for name in order:
        result, wall, bound_of = run_policy(sc, name, fitted)
        forecast = str(result.meta["forecast_mode"])
        if name == "asap-home":
            base, base_result = result.metrics, result
        if bound_of is not None:
            bound = bound_of
        row = policy_row(name, result, wall, base, base_result, sc)
        rows.append(row)
        print(f"{name:>20}: cost {row['cost']:9.2f}  carbon {row['carbon_kg']:8.1f} kg  "
              f"misses {row['deadline_misses']}  {wall:6.1f} s", flush=True)
    table = pd.DataFrame(rows)[list(POLICY_COLUMNS)]
    notes = [f"scenario real4 from examples/real_grid.toml: {sc.n_slots} slots of "
             f"{sc.slot_s // 60} min, {len(sc.jobs)} jobs, zones {', '.join(ZONES)}; "
             f"currency {sc.currency}",
             "command: `python bench/real_grid.py` (imports into a scratch store)",
             f"forecast: {forecast} (the honest default for market prices); full accounting",
             "saved_*: the cost saving against asap-home split into efficiency, temporal, "
             "spatial and movement (they add up to asap-home cost - cost)"]
    if bound is not None:
        b = bound.as_dict()
        notes.append(f"hindsight bound ({b['kind']}): cost {b['cost']:.2f}, carbon "
                     f"{b['carbon_kg']:.1f} kg; the 'offline' row is the hindsight plan "
                     "(replayed)")
    print(table.to_string(index=False))
    write_table(table, "real_grid", "real4 (real 2023 grid data): every policy", notes)
    cost_carbon_bars(table, "real_grid", "real4: CAISO, ERCOT, PJM, DE-LU, July 2023",
                     sc.currency)


if __name__ == "__main__":
    main()
