"""The site meter and the one bill, checked on seed3 and the green-power example.

Usage::

    python bench/site_meter.py [--data ../shared/data] [--skip-green] [--json]

Each case is run the way a user runs it, through the CLI in this process, into a scratch
store: ``workbench plan --scenario S [--power-cap-kw KW] --json --sites-out sites.csv``,
then ``workbench runs show latest --json``. Cases: seed3 uncapped, seed3 with
``--power-cap-kw 75`` (every site's grid import), and the green-power example
(``examples/green_power.toml``, built from ``../shared/data`` as ``bench/green_power.py``
builds it) with and without ``--ignore supply,demand-charges,power-limits``.

Per case it prints and writes (``docs/results/site_meter.{csv,md}``):

- the bill (``bill.total``), the no-jobs bill, the plan's part (``cost``), asap-home's bill;
- the saving on equal work as a share of the bill and of the plan's part, as ``plan --json``
  and ``runs show --json`` give it (``pct_faces_max_diff``: the largest difference between
  the two faces' percentages, points);
- the sites CSV against the bill: ``|sum(grid_charge) - bill.energy|`` (currency),
  ``max(grid_import_kw) - cap`` (kW, <= 0 when the cap held; NaN uncapped) and
  ``min(load_kw - idle load)`` (kW, >= 0: every site-slot's load holds its idle load);
- ``power_cap_violations``, deadline misses, jobs unfinished, CPU seconds of the case.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from common import write_table
from green_power import build

from workbench.cli import main as cli
from workbench.meter import idle_kw
from workbench.store import Store


def _cli(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli(argv)
    if code != 0:
        sys.exit(f"failed: workbench {' '.join(argv)}")
    return out.getvalue()


def case(db: Path, scenario: str, label: str, extra: list[str], cap_kw: float | None,
         tmp: Path) -> dict[str, Any]:
    """One case's row (module docstring)."""
    t0 = time.process_time()
    sites_path = tmp / f"{label}_sites.csv"
    argv = ["--db", str(db), "plan", "--scenario", scenario, "--no-progress", "--json",
            "--sites-out", str(sites_path), *extra]
    if cap_kw is not None:
        argv += ["--power-cap-kw", f"{cap_kw:g}"]
    plan = json.loads(_cli(argv))
    shown = json.loads(_cli(["--db", str(db), "runs", "show", "latest", "--json"]))
    cpu = time.process_time() - t0
    with Store(db, read_only=True) as store:
        sc = store.load_scenario(scenario)
    idle = dict(zip([d.name for d in sc.datacenters], idle_kw(sc).tolist(), strict=True))
    sites = pd.read_csv(sites_path)
    bill, lfl = plan["bill"], plan["like_for_like"]
    faces = max(abs(float(lfl[k]) - float(shown["like_for_like"][k]))
                for k in ("saving_pct", "jobs_saving_pct"))
    return {
        "case": label, "bill_total": bill["total"], "no_jobs_total": bill["no_jobs_total"],
        "plans_part": plan["cost"], "asap_home_bill": plan["baseline"]["bill"]["total"],
        "saving": lfl["saving"], "saving_pct_of_bill": lfl["saving_pct"],
        "saving_pct_of_plans_part": lfl["jobs_saving_pct"], "pct_faces_max_diff": faces,
        "sites_energy_vs_bill": abs(float(sites["grid_charge"].sum()) - bill["energy"]),
        "max_import_over_cap_kw": (float(sites["grid_import_kw"].max()) - cap_kw
                                   if cap_kw is not None else np.nan),
        "min_load_over_idle_kw": float((sites["load_kw"] - sites["datacenter"].map(idle))
                                       .min()),
        "power_cap_violations": plan["power_cap_violations"],
        "deadline_misses": plan["deadline_misses"], "jobs_unfinished": plan["jobs_unfinished"],
        "cpu_s": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2]
                    / "shared" / "data")
    ap.add_argument("--skip-green", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        seed = tmp / "seed3.duckdb"
        _cli(["--db", str(seed), "scenario", "generate", "seed3", "--seed", "0"])
        rows.append(case(seed, "seed3", "seed3", [], None, tmp))
        rows.append(case(seed, "seed3", "seed3 --power-cap-kw 75", [], 75.0, tmp))
        if not args.skip_green:
            green = tmp / "green.duckdb"
            build(args.data, green)
            rows.append(case(green, "green3", "green3", [], None, tmp))
            rows.append(case(green, "green3", "green3 --ignore all",
                             ["--ignore", "supply,demand-charges,power-limits"], None, tmp))
    frame = pd.DataFrame(rows)
    if args.json:
        print(frame.to_json(orient="records"))
        return
    print(frame.T.to_string())
    write_table(frame, "site_meter", "The site meter and the one bill (bench/site_meter.py)")


if __name__ == "__main__":
    main()
