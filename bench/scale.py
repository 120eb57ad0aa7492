"""Time and peak memory of imports and of planning, against rows, jobs and slots.

Usage: ``python bench/scale.py [--rows 250000,1000000,2000000] [--days 1,2,4,7]
[--copies 1,2,4] [--baseline] [--before DIR] [--reimport] [--no-plan]`` (``--baseline``: each
file is also imported with the exact reader, the path every import took before streaming, and
the ratios printed; ``--no-plan`` writes ``docs/results/scale_imports.*`` instead).

Every measurement runs in a fresh child process (``--child``) that reports its own peak
resident set (``VmHWM``; a child's ``ru_maxrss`` would include the parent's size at fork).
Imports: a SustainCluster-format price CSV of N 15-minute rows (``Datetime (UTC),Datetime
(Local),Price (USD/MWh)``) generated into a scratch folder, read by ``read_grid`` and written
by ``write_grid`` (what ``workbench import grid price-csv`` does) into a fresh store, then
imported once more into that store (``--reimport``: every row meets a stored one, the update
path), and with ``--before DIR`` by another copy of the package (the previous commit's).
Each import row carries the 1-minute load average when its child started
(``load_1min``: the machine is shared) and, with ``--baseline``, the baseline row the ratios
``baseline / streaming`` of wall time, parse time and peak memory; the 2 M-row streaming
import is checked against the issue's targets (20 s, 500 MB) as met or missed.
Planning: the built-in ``seed3`` week with ``lyapunov --solver fast`` (the default policy,
fast slot solver) and the ``asap-home`` baseline, (a) over 1, 2, 4 and 7 days with the jobs
of the first day (slots grow, jobs fixed) and (b) over 2 days with the first day's jobs
copied 1, 2 and 4 times (jobs grow, slots fixed). The slope of a least-squares line through
each series is printed: seconds and MB per 1,000 rows, per slot and per job. Writes
``docs/results/scale.{csv,md}`` and ``scale_slopes.{csv,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from common import write_table

ROOT = Path(__file__).resolve().parent.parent


def _price_csv(path: Path, rows: int) -> None:
    """N 15-minute rows from 2000-01-01 (2 M rows: 57 years), prices about -20..180 USD/MWh."""
    times = pd.date_range("2000-01-01", periods=rows, freq="15min")
    rng = np.random.default_rng(0)
    price = np.round(80 + 50 * np.sin(np.arange(rows) / 24 * 2 * np.pi)
                     + rng.normal(0, 20, rows), 2)
    utc = times.strftime("%Y-%m-%d %H:%M:%S+00:00")
    local = (times + pd.Timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S+01:00")
    with path.open("w") as fh:
        fh.write("Datetime (UTC),Datetime (Local),Price (USD/MWh)\n")
        step = 200_000
        for i in range(0, rows, step):
            fh.write("\n".join(f"{a},{b},{c}" for a, b, c in
                               zip(utc[i:i + step], local[i:i + step], price[i:i + step],
                                   strict=True)) + "\n")


IMPORT_TARGET_S = 20.0
IMPORT_TARGET_MB = 500.0
"""Issue 14's target for a 2 M-row grid CSV on the 2-core, 24 GB machine."""


def _load_1min() -> float:
    """The 1-minute load average (``/proc/loadavg``): other work on the shared machine."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def _child_import(path: str, db: str, exact: str = "") -> dict[str, float]:
    from workbench.io import _fast
    from workbench.io.grid import read_grid, write_grid
    from workbench.store import Store

    if exact == "exact":  # the baseline: the exact (non-streaming) reader
        _fast.FAST_MIN_BYTES = 1 << 62

    t0 = time.perf_counter()
    frame = read_grid("price-csv", path, "R")
    t1 = time.perf_counter()
    with Store(db) as store:
        write_grid(store, frame, path)
    return {"parse_s": t1 - t0, "write_s": time.perf_counter() - t1, "rows": len(frame)}


def _child_plan(days: float, copies: int) -> dict[str, float]:
    from workbench.policies import make_policy
    from workbench.scenarios import build_seed3, first_hours
    from workbench.sim import simulate

    sc = first_hours(build_seed3(0), 24 * days, arrivals_h=24)
    train = [j for j in sc.jobs if j.is_training]
    other = [j for j in sc.jobs if not j.is_training]
    jobs = other + [replace(j, job_id=f"{j.job_id}~{k}") if k else j
                    for k in range(copies) for j in train]
    sc = replace(sc, jobs=tuple(sorted(jobs, key=lambda j: (j.arrival, j.job_id))))
    out: dict[str, float] = {"slots": sc.n_slots, "jobs": len(train) * copies}
    for name, knobs in (("asap-home", {}), ("lyapunov", {"solver": "fast"})):
        t0 = time.perf_counter()
        result = simulate(sc, make_policy(name, **knobs), progress=False)
        out[f"{name}_s"] = time.perf_counter() - t0
        out[f"{name}_plan_rows"] = len(result.plan)
    return out


def _own_peak_mb() -> float:
    """This process's peak resident set (``VmHWM``), MB. Unlike ``ru_maxrss`` of a child it
    does not inherit the parent's size at fork."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _measure(argv: list[str], root: Path = ROOT) -> dict[str, float]:
    """Run ``scale.py --child ...`` (with the ``workbench`` package under ``root``) and
    return its JSON plus wall time and peak RSS (MB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", *argv],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)})
    _, status, _usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read() if proc.stdout else ""
    if status != 0:
        raise RuntimeError(f"child {argv} failed with status {status}")
    data = json.loads(out.strip().splitlines()[-1])
    data["wall_s"] = time.perf_counter() - t0
    return data


def _slope(x: list[float], y: list[float]) -> float:
    return float(np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)[0]) if len(x) > 1 \
        else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="250000,1000000,2000000")
    ap.add_argument("--days", default="1,2,4,7")
    ap.add_argument("--copies", default="1,2,4")
    ap.add_argument("--baseline", action="store_true",
                    help="also import each file with the exact reader (ratios against it)")
    ap.add_argument("--before", type=Path, default=None, metavar="DIR",
                    help="also import each file with the workbench package in DIR (e.g. "
                    "`git archive REV workbench | tar -x -C DIR`): ratios against it")
    ap.add_argument("--reimport", action="store_true",
                    help="also import each file a second time into its store (update path)")
    ap.add_argument("--no-plan", action="store_true", help="measure the imports only")
    ap.add_argument("--child", nargs="*", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        kind, *rest = args.child
        res = (_child_import(*rest) if kind == "import"
               else _child_plan(float(rest[0]), int(rest[1])))
        res["peak_mb"] = _own_peak_mb()
        print(json.dumps(res))
        return
    rows_out: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="wb-scale-") as tmp:
        imports = []
        for n in (int(x) for x in args.rows.split(",")):
            path = Path(tmp) / f"prices_{n}.csv"
            _price_csv(path, n)
            mb = path.stat().st_size / 2**20
            db = str(Path(tmp) / f"s{n}.duckdb")
            load = _load_1min()
            r = _measure(["import", str(path), db])
            imports.append((n, r))
            row: dict[str, object] = {
                "what": "import price-csv", "rows": n, "file_mb": round(mb, 1),
                "load_1min": load, "wall_s": round(r["wall_s"], 2),
                "parse_s": round(r["parse_s"], 2), "write_s": round(r["write_s"], 2),
                "peak_mb": round(r["peak_mb"], 0)}
            if n == 2_000_000:
                met = r["wall_s"] <= IMPORT_TARGET_S and r["peak_mb"] <= IMPORT_TARGET_MB
                row["target_20s_500mb"] = "met" if met else "missed"
            rows_out.append(row)
            print(rows_out[-1], flush=True)
            if args.reimport:
                load = _load_1min()
                a = _measure(["import", str(path), db])
                rows_out.append({
                    "what": "import price-csv again (every row stored: update path)",
                    "rows": n, "file_mb": round(mb, 1), "load_1min": load,
                    "wall_s": round(a["wall_s"], 2), "parse_s": round(a["parse_s"], 2),
                    "write_s": round(a["write_s"], 2), "peak_mb": round(a["peak_mb"], 0)})
                print(rows_out[-1], flush=True)
            if args.before is not None:
                load = _load_1min()
                o = _measure(["import", str(path), str(Path(tmp) / f"o{n}.duckdb")],
                             root=args.before.resolve())
                rows_out.append({
                    "what": f"import price-csv, workbench of {args.before.name} (before)",
                    "rows": n, "file_mb": round(mb, 1), "load_1min": load,
                    "wall_s": round(o["wall_s"], 2), "parse_s": round(o["parse_s"], 2),
                    "write_s": round(o["write_s"], 2), "peak_mb": round(o["peak_mb"], 0),
                    "wall_ratio": round(o["wall_s"] / r["wall_s"], 2),
                    "parse_ratio": round(o["parse_s"] / r["parse_s"], 2),
                    "write_ratio": round(o["write_s"] / r["write_s"], 2),
                    "peak_ratio": round(o["peak_mb"] / r["peak_mb"], 2)})
                print(rows_out[-1], flush=True)
            if args.baseline:
                load = _load_1min()
                b = _measure(["import", str(path), str(Path(tmp) / f"b{n}.duckdb"), "exact"])
                rows_out.append({
                    "what": "import price-csv, exact reader (baseline)", "rows": n,
                    "file_mb": round(mb, 1), "load_1min": load,
                    "wall_s": round(b["wall_s"], 2),
                    "parse_s": round(b["parse_s"], 2), "write_s": round(b["write_s"], 2),
                    "peak_mb": round(b["peak_mb"], 0),
                    "wall_ratio": round(b["wall_s"] / r["wall_s"], 2),
                    "parse_ratio": round(b["parse_s"] / r["parse_s"], 2),
                    "peak_ratio": round(b["peak_mb"] / r["peak_mb"], 2)})
                print(rows_out[-1], flush=True)
    plans = []
    if args.no_plan:
        args.days, args.copies = "", ""
    for d in (float(x) for x in args.days.split(",") if x):
        r = _measure(["plan", str(d), "1"])
        plans.append(("slots", r))
    for c in (int(x) for x in args.copies.split(",") if x):
        if c == 1 and 2.0 in [float(x) for x in args.days.split(",") if x]:
            r = next(p for s, p in plans if s == "slots" and p["slots"] == 192)
        else:
            r = _measure(["plan", "2", str(c)])
        plans.append(("jobs", r))
    for series, r in plans:
        rows_out.append({"what": f"plan seed3 ({series} grow)", "slots": int(r["slots"]),
                         "jobs": int(r["jobs"]), "wall_s": round(r["wall_s"], 2),
                         "asap_home_s": round(r["asap-home_s"], 2),
                         "lyapunov_fast_s": round(r["lyapunov_s"], 2),
                         "plan_rows": int(r["lyapunov_plan_rows"]),
                         "peak_mb": round(r["peak_mb"], 0)})
        print(rows_out[-1], flush=True)
    slopes = []
    if len(imports) > 1:
        n = [i[0] / 1000 for i in imports]
        slopes.append({"what": "import", "per": "1,000 rows",
                       "s": _slope(n, [i[1]["wall_s"] for i in imports]),
                       "mb": _slope(n, [i[1]["peak_mb"] for i in imports])})
    for series, key in (("slots", "slots"), ("jobs", "jobs")):
        pts = [r for s, r in plans if s == series]
        if len(pts) > 1:
            x = [r[key] for r in pts]
            slopes.append({"what": f"plan ({series} grow)", "per": key[:-1],
                           "s": _slope(x, [r["lyapunov_s"] + r["asap-home_s"] for r in pts]),
                           "mb": _slope(x, [r["peak_mb"] for r in pts])})
    table = pd.DataFrame(rows_out)
    slope_table = pd.DataFrame(slopes).round(5)
    print(table.to_string(index=False))
    print(slope_table.to_string(index=False))
    stem = "scale_imports" if args.no_plan else "scale"
    write_table(table, stem, title="Scale: time and peak memory")
    if not args.no_plan:
        write_table(slope_table, "scale_slopes", title="Scale: slopes")


if __name__ == "__main__":
    sys.exit(main())
