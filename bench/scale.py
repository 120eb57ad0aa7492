"""Time and peak memory of imports and of planning, against rows, jobs and slots.

Usage: ``python bench/scale.py [--rows 250000,1000000,2000000] [--days 1,2,4,7]
[--copies 1,2,4] [--baseline] [--before DIR] [--reimport] [--no-plan] [--philly-days
1,3,7.5,30] [--philly-offset 25] [--philly-spans 40,80] [--scale-mode 4] [--max-columns N]
[--data ../shared/data]`` (``--baseline``: each file is also imported with the exact reader,
the path every import took before streaming, and the ratios printed; ``--no-plan`` writes
``docs/results/scale_imports.*`` instead).

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
Planning: the built-in ``seed3`` week with the default policy
(:data:`workbench.policies.DEFAULT_POLICY`, ``lookahead``) and the ``asap-home`` baseline,
(a) over 1, 2, 4 and 7 days with the jobs of the first day (slots grow, jobs fixed) and (b)
over 2 days with the first day's jobs copied 1, 2 and 4 times (jobs grow, slots fixed). The
slope of a least-squares line through each series is printed: seconds and MB per 1,000
rows, per slot and per job. Writes ``docs/results/scale.{csv,md}`` and
``scale_slopes.{csv,md}``.

Philly (``--philly-days D``, needs ``--data``): the scenario of ``bench/philly.py`` (every
Philly job submitted in a ``D``-day window starting ``--philly-offset`` days after the
trace's first job, four real-grid datacenters, 1,024 GPUs, 15-minute slots) built in a
fresh store, then what ``workbench plan`` does: ``asap-home`` and the default policy
simulated, both stored in one transaction (:func:`workbench.recorders.save_results`).
``--philly-spans`` measures windows of the whole trace from its start (``--philly-from``
days) for the extrapolation to the full trace (slope per slot, stated as an extrapolation).
``--scale-mode K`` runs the default policy with ``arrival_replan_slots = K`` (the
look-ahead's scale mode, 0: the policy's defaults). Each reports its phases' seconds, its
own peak resident set and the load average before and after (the machine is shared).
Writes ``docs/results/scale_philly.{csv,md}`` (``--philly-stem``: another stem).
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
from typing import Any

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
    from workbench.policies import DEFAULT_POLICY
    from workbench.runner import RunSpec, simulate_spec
    from workbench.scenarios import build_seed3, first_hours

    sc = first_hours(build_seed3(0), 24 * days, arrivals_h=24)
    train = [j for j in sc.jobs if j.is_training]
    other = [j for j in sc.jobs if not j.is_training]
    jobs = other + [replace(j, job_id=f"{j.job_id}~{k}") if k else j
                    for k in range(copies) for j in train]
    sc = replace(sc, jobs=tuple(sorted(jobs, key=lambda j: (j.arrival, j.job_id))))
    out: dict[str, float] = {"slots": sc.n_slots, "jobs": len(train) * copies}
    for key, name in (("asap-home", "asap-home"), ("default", DEFAULT_POLICY)):
        t0 = time.perf_counter()
        result, _ = simulate_spec(RunSpec(sc.name, name, baseline=False), sc)
        out[f"{key}_s"] = time.perf_counter() - t0
        out[f"{key}_plan_rows"] = len(result.plan)
    return out


class _Progress:
    """Prints to stderr, every 96 slots, the slot, wall and CPU seconds, active jobs and
    peak RSS (a long run shows how far it got); keeps the run's wall and CPU seconds and
    the peak resident set during the run (``VmHWM`` at its last slot)."""

    def __init__(self, name: str, n_slots: int) -> None:
        self.name, self.n_slots = name, n_slots
        self.t0 = time.perf_counter()
        self.c0 = time.process_time()
        self.wall_s = self.cpu_s = self.peak_last_slot_mb = 0.0

    def start(self, run_meta: object) -> None:  # noqa: ARG002
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def record(self, rec: Any) -> None:
        t = int(rec.t)
        if t % 96 == 0 or t == self.n_slots - 1:
            summary = rec.summary
            print(f"progress {self.name} slot {t}/{self.n_slots} wall "
                  f"{time.perf_counter() - self.t0:.0f} s cpu {time.process_time() - self.c0:.0f}"
                  f" s active {summary['jobs_active']} running {summary['jobs_running']} peak "
                  f"{_own_peak_mb():.0f} MB", file=sys.stderr, flush=True)
        if t == self.n_slots - 1:
            self.peak_last_slot_mb = _own_peak_mb()

    def finish(self, result: object) -> None:  # noqa: ARG002
        self.wall_s = time.perf_counter() - self.t0
        self.cpu_s = time.process_time() - self.c0


def _child_philly(data: str, days: float, offset: float, scale_mode: int, max_columns: int,
                  db: str, kind: str = "philly") -> dict[str, float]:
    """Build the scenario (``kind``: the Philly window, or ``alibaba``: the Alibaba v2023
    pods re-timed over ``days`` days), then what ``workbench plan`` does: the runner's
    :func:`~workbench.runner.run_spec` (asap-home, the default policy, the attribution)
    and :func:`~workbench.runner.save_outcome` (both runs in one transaction)."""
    import resource

    from philly import build_alibaba_year, build_philly

    from workbench import runner
    from workbench.policies import DEFAULT_POLICY

    c0, t0 = time.process_time(), time.perf_counter()
    sc = (build_alibaba_year(db, data, days) if kind == "alibaba"
          else build_philly(db, data, days if days > 0 else None, offset))
    out: dict[str, float] = {"build_s": time.perf_counter() - t0, "slots": sc.n_slots,
                             "jobs": len(sc.jobs), "build_cpu_s": time.process_time() - c0}
    c1, t1 = time.process_time(), time.perf_counter()
    fitted = runner.fit_forecast(sc, runner.forecast_mode(runner.RunSpec(sc.name), sc))
    out["forecast_fit_s"] = time.perf_counter() - t1
    out["forecast_fit_cpu_s"] = time.process_time() - c1
    knobs: dict[str, int] = {}
    if scale_mode > 0:
        knobs["arrival_replan_slots"] = scale_mode
    if max_columns > 0:
        knobs["max_columns"] = max_columns
    base_rec = _Progress("asap-home", sc.n_slots)
    pol_rec = _Progress(DEFAULT_POLICY, sc.n_slots)
    spec = runner.RunSpec(sc.name, DEFAULT_POLICY, knobs=knobs, baseline=True)
    outcome = runner.run_spec(spec, sc, fitted=fitted, recorders=[pol_rec],
                              baseline_recorders=[base_rec])
    out["peak_during_runs_mb"] = max(base_rec.peak_last_slot_mb, pol_rec.peak_last_slot_mb)
    out["peak_after_runs_mb"] = _own_peak_mb()
    assert outcome.baseline is not None
    for key, res, rec in (("asap", outcome.baseline, base_rec),
                          ("default", outcome.result, pol_rec)):
        out[f"{key}_s"] = rec.wall_s
        out[f"{key}_cpu_s"] = rec.cpu_s
        out[f"{key}_rows"] = len(res.plan)
        out[f"{key}_cost"] = float(res.metrics["cost"])
        out[f"{key}_finished"] = int(res.metrics["jobs_finished"])
        out[f"{key}_misses"] = int(res.metrics["deadline_misses"])
        out[f"{key}_active_max"] = int(res.slots["jobs_active"].max())
        out[f"{key}_fallbacks"] = int(res.metrics["fallbacks"])
    out["asap_peak_mb"] = base_rec.peak_last_slot_mb
    c2, t2 = time.process_time(), time.perf_counter()
    saved = runner.save_outcome(outcome, db)
    out["save_s"] = time.perf_counter() - t2
    out["save_cpu_s"] = time.process_time() - c2
    out["stored"] = len(saved.run_ids)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_s"] = usage.ru_utime + usage.ru_stime
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
    load0 = Path("/proc/loadavg").read_text().split()[0]
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
    data["load_avg"] = f"{load0} -> {Path('/proc/loadavg').read_text().split()[0]}"
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
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                    help="the shared data folder (Philly trace, SustainCluster grid)")
    ap.add_argument("--philly-days", default=None,
                    help="plan D-day windows of the Philly trace, e.g. 3,7.5,30 (0: the whole "
                    "trace)")
    ap.add_argument("--philly-offset", type=float, default=25.0,
                    help="days after the trace's first job where the window starts")
    ap.add_argument("--philly-spans", default="",
                    help="also plan windows of these many days from the trace start")
    ap.add_argument("--alibaba-days", type=float, default=0.0,
                    help="also plan the Alibaba v2023 pods re-timed over this many days "
                    "(365: a year)")
    ap.add_argument("--scale-mode", type=int, default=0,
                    help="arrival_replan_slots of the default policy (0: its default)")
    ap.add_argument("--max-columns", type=int, default=0,
                    help="max_columns of the default policy's window LP (0: its default)")
    ap.add_argument("--philly-stem", default="scale_philly",
                    help="file stem of the Philly/Alibaba table under docs/results (runs "
                    "started side by side write their own)")
    ap.add_argument("--child", nargs="*", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        kind, *rest = args.child
        if kind == "import":
            res = _child_import(*rest)
        elif kind in ("philly", "alibaba"):
            res = _child_philly(rest[0], float(rest[1]), float(rest[2]), int(rest[3]),
                                int(rest[4]), rest[5], kind)
        else:
            res = _child_plan(float(rest[0]), int(rest[1]))
        res["peak_mb"] = _own_peak_mb()
        print(json.dumps(res))
        return
    rows_out: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="wb-scale-") as tmp:
        imports = []
        for n in (int(x) for x in args.rows.split(",") if x):
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
                         "default_s": round(r["default_s"], 2),
                         "plan_rows": int(r["default_plan_rows"]),
                         "peak_mb": round(r["peak_mb"], 0),
                         "load_avg": r["load_avg"]})
        print(rows_out[-1], flush=True)
    philly = (_philly(args) if args.philly_days is not None or args.philly_spans
              or args.alibaba_days else [])
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
            slopes.append({"what": f"plan seed3 ({series} grow)", "per": key[:-1],
                           "s": _slope(x, [r["default_s"] + r["asap-home_s"] for r in pts]),
                           "mb": _slope(x, [r["peak_mb"] for r in pts])})
    spans = [r for r in philly if r["what"].startswith("philly span")]
    if len(spans) > 1:
        x = [r["slots"] for r in spans]
        slopes.append({"what": "plan philly spans (asap-home + default)", "per": "slot",
                       "s": _slope(x, [r["asap_s"] + r["default_s"] for r in spans]),
                       "mb": _slope(x, [r["peak_mb"] for r in spans])})
    table = pd.DataFrame(rows_out)
    slope_table = pd.DataFrame(slopes).round(5)
    print(table.to_string(index=False))
    print(slope_table.to_string(index=False))
    if len(table):
        stem = "scale_imports" if args.no_plan else "scale"
        write_table(table, stem, title="Scale: time and peak memory")
    if not args.no_plan and len(slope_table):
        write_table(slope_table, "scale_slopes", title="Scale: slopes")
    if philly:
        ptable = pd.DataFrame(philly)
        print(ptable.to_string(index=False))
        write_table(ptable, args.philly_stem, title="Scale: the Philly trace, planned")


def _philly(args: argparse.Namespace) -> list[dict[str, object]]:
    """The Philly window (``--philly-days``) and spans from the trace start."""
    runs: list[tuple[str, str, float, float]] = []
    for days in (float(d) for d in (args.philly_days or "").split(",") if d):
        what = ("philly whole trace" if days == 0
                else f"philly {days:g} days from day {args.philly_offset:g}")
        runs.append(("philly", what, days, args.philly_offset))
    runs += [("philly", f"philly span {float(d):g} days from day 0", float(d), 0.0)
             for d in args.philly_spans.split(",") if d]
    if args.alibaba_days:
        runs.append(("alibaba", f"alibaba v2023 pods re-timed over {args.alibaba_days:g} days",
                     args.alibaba_days, 0.0))
    out: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="wb-philly-") as tmp:
        for i, (kind, what, days, offset) in enumerate(runs):
            r = _measure([kind, args.data, str(days), str(offset), str(args.scale_mode),
                          str(args.max_columns), str(Path(tmp) / f"p{i}.duckdb")])
            row: dict[str, object] = {
                "what": what, "scale_mode": args.scale_mode or "",
                "max_columns": args.max_columns or "", "slots": int(r["slots"]),
                "jobs": int(r["jobs"]), "wall_s": round(r["wall_s"], 1),
                "build_s": round(r["build_s"], 1),
                "forecast_fit_s": round(r["forecast_fit_s"], 1),
                "asap_s": round(r["asap_s"], 1),
                "default_s": round(r["default_s"], 1), "save_s": round(r["save_s"], 1),
                "plan_s": round(r["asap_s"] + r["default_s"] + r["save_s"], 1),
                "build_cpu_s": round(r["build_cpu_s"] + r["forecast_fit_cpu_s"], 1),
                "asap_cpu_s": round(r["asap_cpu_s"], 1),
                "default_cpu_s": round(r["default_cpu_s"], 1),
                "save_cpu_s": round(r["save_cpu_s"], 1),
                "default_rows": int(r["default_rows"]), "asap_rows": int(r["asap_rows"]),
                "peak_mb": round(r["peak_mb"], 0),
                "peak_during_runs_mb": round(r["peak_during_runs_mb"], 0),
                "peak_after_runs_mb": round(r["peak_after_runs_mb"], 0),
                "asap_peak_mb": round(r["asap_peak_mb"], 0),
                "active_max": int(r["default_active_max"]),
                "finished": f"{int(r['default_finished'])} (asap {int(r['asap_finished'])})",
                "deadline_misses": f"{int(r['default_misses'])} (asap {int(r['asap_misses'])})",
                "cost_vs_asap": round(r["default_cost"] / r["asap_cost"], 3)
                if r["asap_cost"] else float("nan"),
                "fallbacks": int(r["default_fallbacks"]), "cpu_s": round(r["cpu_s"], 1),
                "load_avg": r["load_avg"],
            }
            out.append(row)
            print(row, flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
