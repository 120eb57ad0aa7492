"""A fleet of 50 datacenters and 10,000 active jobs: one slot's decision, decomposed by
datacenter groups, against the monolithic look-ahead where that one runs.

Usage::

    python bench/fleet.py [--sizes 10x1000,20x2500,50x10000] [--slots 6] [--group-size 5]
                          [--monolithic-max 2500] [--compare-max 2500] [--workers 2]
                          [--scheduler ADDR] [--variants opening,home]
                          [--day 10x400] [--data ../shared/data] [--out NAME]

For each size ``DxJ`` the fleet of :func:`workbench.fleet.build_fleet` (``D`` sites on the
real zones, ``J`` jobs running at the start, 26 hours planned) is simulated for its first
``--slots`` slots (slot 0 and every 4th re-plan the window) by:

- ``lookahead-groups`` in this process (the groups one after the other);
- ``lookahead-groups`` on Dask (``--workers`` single-threaded workers of a ``LocalCluster``,
  or the cluster at ``--scheduler``; one actor per group);
- the monolithic ``lookahead`` (``max_columns`` = groups x 60,000, the decomposed solve's
  total), for sizes with at most ``--monolithic-max`` jobs;
- ``--variants``: ``lookahead-groups`` in this process with the opening only
  (``coordinate_rounds=0``: ``opening``) or without any coordination (each group plans its
  home jobs: ``home``), what the rounds and the whole coordination cost and save.

Per run and slot: CPU seconds (this process and every child, Dask's workers included:
``psutil``) and wall seconds; whether the window was re-planned; the window plan's
cost (forecast prices, scenario currency) and shortfall (work the window cannot fit, in jobs)
summed over the groups; the peak resident set of this process and of its children (MB).
The 60-second target is checked on the slowest slot's CPU seconds (re-plan included).
For the groups: the coordination's rounds at slot 0 and slot 4 (plan cost after each, the
jobs moved) and, for sizes with at most ``--compare-max`` jobs, the monolithic
look-ahead's window plan of the same state as the in-process run's (solved after the run,
outside the slots' seconds, with a 600-second limit): the cost gap of one decision.

``--day DxJ``: a whole day (96 slots) of a small fleet through the simulator with both
policies: cost, work done (sum of progress, in jobs), cost per job of work, deadline misses;
the cost gap per unit of work is the decomposition's price. Writes
``docs/results/fleet{,_NAME}.{csv,md}`` and ``fleet_day{,_NAME}.{csv,md}``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
from common import write_table

from workbench.fleet import build_fleet
from workbench.policies.grouped import GroupedLookahead, datacenter_groups
from workbench.policies.lookahead import LookaheadPolicy
from workbench.sim import simulate

ROOT = Path(__file__).resolve().parent.parent


class _Stop(Exception):
    """Raised by the recorder after the wanted slots (the bench stops the run there)."""


def _cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of this process and all its children (live ones)."""
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return float(total)


def _children_rss_mb(proc: psutil.Process) -> float:
    rss = 0
    for child in proc.children(recursive=True):
        try:
            rss += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return rss / 2**20


def _own_peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _Slots:
    """Per slot: CPU and wall seconds, re-plan, plan cost and shortfall; stops the run."""

    def __init__(self, policy: Any, slots: int) -> None:
        self.policy, self.slots = policy, slots
        self.proc = psutil.Process(os.getpid())
        self.rows: list[dict[str, Any]] = []
        self.children_mb = 0.0

    def start(self, run_meta: Any) -> None:  # noqa: ARG002
        self.c0, self.w0 = _cpu_s(self.proc), time.perf_counter()

    def record(self, rec: Any) -> None:
        c, w = _cpu_s(self.proc), time.perf_counter()
        cost, short, cols, replan = _plan_of(self.policy, int(rec.t))
        self.children_mb = max(self.children_mb, _children_rss_mb(self.proc))
        self.rows.append({"slot": int(rec.t), "cpu_s": c - self.c0, "wall_s": w - self.w0,
                          "replan": replan, "plan_cost": cost, "shortfall_jobs": short,
                          "columns": cols, "active": int(rec.summary["jobs_active"])})
        self.c0, self.w0 = _cpu_s(self.proc), time.perf_counter()
        if int(rec.t) + 1 >= self.slots:
            raise _Stop

    def finish(self, result: Any) -> None:  # noqa: ARG002
        return None


def _plan_of(policy: Any, t: int) -> tuple[float, float, int, bool]:
    """The window plan's cost, shortfall and columns (summed over groups) and whether it
    was made in slot ``t``."""
    if isinstance(policy, GroupedLookahead):
        reps = [r for r in policy.reports if r is not None]
        return (sum(r.plan_cost for r in reps), sum(r.shortfall for r in reps),
                sum(r.n_columns for r in reps), any(r.plan_t0 == t for r in reps))
    plan = policy.plan
    if plan is None:
        return math.nan, math.nan, 0, False
    return plan.cost, float(sum(plan.shortfall.values())), plan.n_columns, plan.t0 == t


class _Keep:
    """The policy, keeping the state and forecast of the chosen slots (for the monolithic
    plan of the same state, solved after the run)."""

    def __init__(self, inner: Any, slots: tuple[int, ...]) -> None:
        self.inner, self.slots, self.name = inner, slots, inner.name
        self.kept: dict[int, tuple[Any, Any]] = {}

    def hindsight_bound(self) -> None:
        return None

    def reset(self, scenario: Any) -> None:
        self.inner.reset(scenario)

    def decide(self, state: Any, forecast: Any) -> Any:
        if state.t in self.slots:
            self.kept[state.t] = (state, forecast)
        return self.inner.decide(state, forecast)


def _run(sc: Any, policy: Any, slots: int, keep: tuple[int, ...] = ()
         ) -> tuple[list[dict[str, Any]], float, float, dict[int, tuple[Any, Any]]]:
    """The first ``slots`` slots of ``sc`` under ``policy``: per-slot rows, the children's
    peak memory (MB), the seconds to start the policy (a Dask cluster and its actors),
    measured before the run and left out of its slots, and the states of slots ``keep``."""
    w0 = time.perf_counter()
    policy.reset(sc.view())
    startup_s = time.perf_counter() - w0
    rec = _Slots(policy, slots)
    kept = _Keep(policy, keep)
    try:
        simulate(sc, kept if keep else policy, forecast_mode="perfect", recorders=[rec])
    except _Stop:
        pass
    finally:
        close = getattr(policy, "close", None)
        if close is not None:
            close()
    return rec.rows, rec.children_mb, startup_s, kept.kept


def _same_state(kept: dict[int, tuple[Any, Any]], n_groups: int) -> dict[int, float]:
    """The monolithic look-ahead's window plan cost of each kept state."""
    out = {}
    for t, (state, forecast) in sorted(kept.items()):
        whole = LookaheadPolicy(max_columns=60_000 * n_groups, time_limit_s=600.0)
        whole.reset(state.scenario)
        try:
            out[t] = whole.solve_window(state, forecast).cost
        except RuntimeError as exc:  # not solved within the limit: no gap to report
            print(f"monolithic plan of slot {t}'s state: {exc}", flush=True)
    return out


def _rounds(policy: Any, t: int) -> str:
    """The coordination at slot ``t``: plan cost after each round (jobs moved)."""
    rounds = [r for r in getattr(policy, "rounds", []) if r.t == t]
    return " -> ".join(f"{r.plan_cost:.2f} ({r.moves}{', undone' if r.undone else ''})"
                       for r in rounds)


def _sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        if part:
            d, j = part.lower().split("x")
            out.append((int(d), int(j)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10x1000,20x2500,50x10000")
    ap.add_argument("--slots", type=int, default=6)
    ap.add_argument("--group-size", type=int, default=5)
    ap.add_argument("--monolithic-max", type=int, default=2500)
    ap.add_argument("--compare-max", type=int, default=2500)
    ap.add_argument("--variants", default="")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scheduler", default=None)
    ap.add_argument("--day", default="")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    for n_dc, n_jobs in _sizes(args.sizes):
        c0 = time.process_time()
        sc = build_fleet(args.data, n_datacenters=n_dc, active_jobs=n_jobs, horizon_h=26.0)
        build_s = time.process_time() - c0
        n_groups = len(datacenter_groups(sc.view(), args.group_size))
        runs: list[tuple[str, Any]] = [
            ("groups, in process", GroupedLookahead(group_size=args.group_size))]
        variants = {"opening": ("groups, opening only", {"coordinate_rounds": 0}),
                    "home": ("groups, home (no coordination)",
                             {"coordinate_rounds": 0, "opening": False})}
        for v in filter(None, args.variants.split(",")):
            what, knobs = variants[v]
            runs.append((what, GroupedLookahead(group_size=args.group_size, **knobs)))
        if args.workers or args.scheduler:
            runs.append((f"groups, Dask ({args.scheduler or f'{args.workers} workers'})",
                         GroupedLookahead(group_size=args.group_size, workers=args.workers,
                                          scheduler=args.scheduler)))
        if n_jobs <= args.monolithic_max:
            runs.append(("monolithic", LookaheadPolicy(max_columns=60_000 * n_groups)))
        for what, policy in runs:
            grouped = isinstance(policy, GroupedLookahead)
            compare = what == "groups, in process" and n_jobs <= args.compare_max
            slots, children_mb, startup_s, kept = _run(
                sc, policy, args.slots, keep=(0, 4) if compare else ())
            frame = pd.DataFrame(slots)
            same = _same_state(kept, n_groups)
            rp = frame[frame["replan"]]
            row = {
                "size": f"{n_dc} x {n_jobs}", "run": what, "groups": n_groups,
                "jobs_in_scenario": len(sc.jobs),
                "active_at_start": int(frame["active"].iloc[0]),
                "build_cpu_s": round(build_s, 1), "startup_wall_s": round(startup_s, 1),
                "slot0_cpu_s": round(float(frame["cpu_s"].iloc[0]), 2),
                "replan_cpu_s_max": round(float(rp["cpu_s"].max()), 2) if len(rp) else math.nan,
                "other_cpu_s_mean": round(float(frame.loc[~frame["replan"], "cpu_s"].mean()), 2)
                if (~frame["replan"]).any() else math.nan,
                "slot_cpu_s_max": round(float(frame["cpu_s"].max()), 2),
                "slot_wall_s_max": round(float(frame["wall_s"].max()), 2),
                "target_60s": "met" if float(frame["cpu_s"].max()) <= 60 else "missed",
                "plan_cost_slot0": round(float(frame["plan_cost"].iloc[0]), 3),
                "shortfall_slot0": round(float(frame["shortfall_jobs"].iloc[0]), 3),
                "plan_cost_replan4": round(float(frame["plan_cost"].iloc[4]), 3)
                if len(frame) > 4 else math.nan,
                "mono_same_state_slot0": round(same[0], 3) if 0 in same else math.nan,
                "mono_same_state_replan4": round(same[4], 3) if 4 in same else math.nan,
                "rounds_slot0": _rounds(policy, 0) if grouped else "",
                "rounds_slot4": _rounds(policy, 4) if grouped else "",
                "coordinate_cpu_s": round(policy.coordinate_s, 2) if grouped else math.nan,
                "columns_max": int(frame["columns"].max()),
                "moves": getattr(policy, "moves", ""),
                "peak_mb": round(_own_peak_mb(), 0), "workers_mb": round(children_mb, 0),
                "load_avg": f"{load0:.1f} -> {os.getloadavg()[0]:.1f}"}
            for key, t in (("slot0", 0), ("replan4", 4)):
                row[f"gap_{key}"] = (round(row[f"plan_cost_{key}"] / same[t] - 1.0, 4)
                                     if t in same else math.nan)
            rows.append(row)
            print(row, flush=True)
            print(frame.round(3).to_string(index=False), flush=True)
    name = "fleet" + (f"_{args.out}" if args.out else "")
    if rows:
        write_table(pd.DataFrame(rows), name, title="Fleet: one slot's decision, decomposed "
                    "by datacenter groups against the monolithic look-ahead")
    if args.day:
        day_rows = []
        for n_dc, n_jobs in _sizes(args.day):
            sc = build_fleet(args.data, n_datacenters=n_dc, active_jobs=n_jobs, horizon_h=24.0)
            n_groups = len(datacenter_groups(sc.view(), args.group_size))
            for what, policy in (
                    ("groups", GroupedLookahead(group_size=args.group_size)),
                    ("monolithic", LookaheadPolicy(max_columns=60_000 * n_groups)),
                    ("monolithic, 60,000 columns", LookaheadPolicy())):
                c0 = time.process_time()
                res = simulate(sc, policy, forecast_mode="perfect")
                m = res.metrics
                work = float(res.plan["progress"].sum())
                day_rows.append({
                    "size": f"{n_dc} x {n_jobs}", "run": what, "groups": n_groups,
                    "cpu_s": round(time.process_time() - c0, 1), "cost_usd": m["cost"],
                    "work_jobs": round(work, 2), "usd_per_job_of_work": m["cost"] / work,
                    "carbon_kg": m["carbon_kg"], "deadline_misses": m["deadline_misses"],
                    "jobs_finished": m["jobs_finished"],
                    "moves": getattr(policy, "moves", "")})
                print(day_rows[-1], flush=True)
        table = pd.DataFrame(day_rows)
        base = table.groupby("size")["usd_per_job_of_work"].transform(
            lambda s: float(s.iloc[1]))
        table["per_work_vs_monolithic"] = (table["usd_per_job_of_work"] / base - 1.0).round(4)
        print(table.to_string(index=False))
        write_table(table, "fleet_day" + (f"_{args.out}" if args.out else ""),
                    title="Fleet: a day planned by groups and by the monolithic look-ahead")


if __name__ == "__main__":
    main()
