"""Grids of simulator runs on Dask distributed: policies x V x carbon caps x seeds.

:func:`sweep_points` expands the grid; :func:`run_sweep` runs it on a Dask cluster (a
``LocalCluster`` it starts and stops, or an existing scheduler by address) and gathers one
row of metrics per run. Runs execute on the workers; storing happens on the client, in
the order runs finish, through :meth:`workbench.store.Store.save_run` (DuckDB takes one
writer, and a remote worker cannot see the client's store file). Workers of an existing
cluster need the same ``workbench`` package installed.

A carbon cap is given in kg over the horizon or as a percentage below the ``asap-home`` run
of the same seed: ``cap_kg = carbon_kg(asap-home, seed) * (1 - pct / 100)``. The baseline
runs first (it is also a row of the result), then the rest of the grid.

A knob is only varied for a policy that takes it (``V`` for ``lyapunov``, the carbon cap
for the policies that take ``caps``, read from the policy's constructor), so that a grid
does not repeat identical runs.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from tqdm.auto import tqdm

from workbench import runner
from workbench.caps import Caps
from workbench.io.plan_csv import write_csv
from workbench.model import Scenario
from workbench.policies import POLICY_NAMES, policy_knobs
from workbench.runner import BASELINE, ForecastSettings, RunSpec, SimSettings, simulate_spec
from workbench.sim import RunResult

if TYPE_CHECKING:
    from workbench.forecast import ModelForecast

log = logging.getLogger(__name__)


class SweepError(ValueError):
    """A sweep cannot start (e.g. its Dask scheduler is unreachable); the message says why."""


ROW_KEYS: tuple[str, ...] = (
    "policy", "V", "carbon_cap", "carbon_cap_kg", "seed", "run_id", "status", "elapsed_s",
    "n_warnings", "message",
)
"""Leading columns of the sweep table; the run's metrics follow."""


@dataclass(frozen=True)
class SweepPoint:
    """One run of the grid: a policy with its knobs, under one seed."""

    policy: str
    seed: int
    V: float | None = None
    carbon_cap: Caps = field(default_factory=Caps)
    knobs: Mapping[str, Any] = field(default_factory=dict)

    def spec(self, scenario: str, forecast: ForecastSettings, sim: SimSettings,
             caps: Caps) -> RunSpec:
        """The point as a run spec (its seed in ``sim``; ``caps`` already resolved)."""
        knobs = dict(self.knobs)
        if self.V is not None:
            knobs["V"] = self.V
        return RunSpec(scenario=scenario, policy=self.policy, knobs=knobs, caps=caps,
                       forecast=forecast, sim=replace(sim, seed=self.seed), baseline=False)


def _accepts(policy: str, knob: str) -> bool:
    return knob in policy_knobs(policy)


def sweep_points(
    policies: Sequence[str],
    *,
    V: Sequence[float] = (),
    carbon_caps: Sequence[Caps] = (),
    seeds: Sequence[int] = (0,),
    knobs: Mapping[str, Any] | None = None,
) -> list[SweepPoint]:
    """Expand the grid: for each policy, V values and caps only where the policy takes them.

    A percentage cap adds the baseline (``asap-home``) for every seed if it is missing.
    """
    if not policies:
        raise ValueError("a sweep needs at least one policy")
    if any(not (math.isfinite(v) and v > 0) for v in V):
        raise ValueError(f"V values must be positive, got {list(V)}")
    out: list[SweepPoint] = []
    seen: set[tuple[Any, ...]] = set()
    policies = list(dict.fromkeys(policies))
    if any(c.needs_baseline for c in carbon_caps) and BASELINE not in policies:
        policies.insert(0, BASELINE)
    for name in policies:
        v_grid: list[float | None] = list(V) if V and _accepts(name, "V") else [None]
        c_grid = list(carbon_caps) if carbon_caps and _accepts(name, "caps") else [Caps()]
        extra = {k: v for k, v in (knobs or {}).items() if _accepts(name, k)}
        for v, cap, seed in itertools.product(v_grid, c_grid, seeds):
            key = (name, v, cap, seed)
            if key not in seen:
                seen.add(key)
                out.append(SweepPoint(name, int(seed), v, cap, extra))
    return out


def run_point(scenario: Scenario, spec: RunSpec, fitted: ModelForecast | None
              ) -> tuple[RunResult, float]:
    """Simulate one point's spec (this runs on a worker); returns the run and its seconds."""
    _hold_run_warnings()
    t0 = time.perf_counter()
    result, _ = simulate_spec(spec, scenario, fitted=fitted)
    return result, time.perf_counter() - t0


class _NotARunWarning(logging.Filter):
    """Drops the log records that repeat a run's warnings (``RUN_WARNING``): they travel
    with the run (``RunResult.warnings``, stored in its log) and the command that ran the
    grid says each once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "run_warning", False)


def _hold_run_warnings() -> None:
    """In a worker process, keep the runs' warnings off the terminal they share with the
    client: each worker printed each (its log's last-resort handler writes to the
    inherited stderr), so a grid said every line once per run and per worker. A
    threaded cluster (the client's own process) keeps the client's logging as it is."""
    import multiprocessing

    if multiprocessing.parent_process() is None:
        return
    handlers = [*logging.getLogger().handlers, logging.lastResort]
    for handler in handlers:
        if handler is not None and not any(isinstance(f, _NotARunWarning)
                                           for f in handler.filters):
            handler.addFilter(_NotARunWarning())


def _row(point: SweepPoint, cap_kg: float | None, run_id: str | None, status: str,
         elapsed_s: float, result: RunResult | None, message: str = "") -> dict[str, Any]:
    row: dict[str, Any] = {
        "policy": point.policy, "V": point.V, "carbon_cap": point.carbon_cap.label,
        "carbon_cap_kg": cap_kg, "seed": point.seed, "run_id": run_id, "status": status,
        "elapsed_s": elapsed_s, "n_warnings": len(result.warnings) if result else 0,
        "message": message,
    }
    if result is not None:
        for key, value in result.metrics.items():
            if isinstance(value, int | float | str | bool) or value is None:
                row[key] = value
        bound = result.meta.get("bound")
        if isinstance(bound, Mapping):
            row["bound_cost"] = float(bound["cost"])
            row["bound_carbon_kg"] = float(bound["carbon_kg"])
    return row


def run_sweep(
    scenario: Scenario,
    points: Sequence[SweepPoint],
    *,
    db: str | Path | None = None,
    csv_path: str | Path | None = None,
    scheduler_address: str | None = None,
    n_workers: int = 2,
    threads_per_worker: int = 1,
    processes: bool = True,
    forecast: ForecastSettings | None = None,
    sim: SimSettings | None = None,
    progress: bool = True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> pd.DataFrame:
    """Run every point on Dask and return one row per run (:data:`ROW_KEYS`, then metrics).

    Parameters
    ----------
    scenario : Scenario
        Sent once to every worker (``scatter(broadcast=True)``).
    points : sequence of SweepPoint
        From :func:`sweep_points`.
    db : path, optional
        Store every run there (``Store.save_run``, meta ``status="sweep"``); the row's
        ``run_id`` names it.
    csv_path : path, optional
        Write the table there once all runs are done.
    scheduler_address : str, optional
        ``tcp://HOST:PORT`` of a running scheduler; default: a ``LocalCluster`` of
        ``n_workers`` worker processes on loopback. With ``processes=False`` the cluster
        runs in this process, one simulation at a time (Pyomo's solver-output capture is
        not thread-safe), which is for tests and debugging.
    forecast, sim : ForecastSettings, SimSettings, optional
        Shared by every run (each point's seed replaces ``sim.seed``). The forecast mode is
        decided once (:func:`workbench.runner.forecast_mode`) and a model forecast fitted
        once on the client and sent to every worker with the scenario.
    progress : bool
        A tqdm bar on stderr, advanced as runs finish.
    on_result : callable(row), optional
        Called on the client with each row as its run finishes (e.g. an app's live table).

    Notes
    -----
    A run that raises becomes a row with ``status="error"`` and the exception's text in
    ``message``; the rest of the grid still runs. A run whose percentage cap needs a failed
    baseline is skipped with ``status="skipped"``.
    """
    from distributed import as_completed

    forecast = forecast or ForecastSettings()
    sim = sim or SimSettings()
    if not points:
        raise ValueError("the sweep has no runs")
    client, cluster = _connect(scheduler_address, n_workers, threads_per_worker, processes)
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(points), desc=f"sweep {scenario.name}", unit="run", disable=not progress)
    try:
        log.info("sweep of %d runs on %s", len(points), client.scheduler.address)
        sc_future = client.scatter(scenario, broadcast=True)
        # The forecast is decided and fitted once for the whole grid.
        mode = runner.forecast_mode(RunSpec(scenario.name, forecast=forecast), scenario)
        forecast = replace(forecast, mode=mode)
        fitted = runner.fit_forecast(scenario, mode, forecast.model)
        fc_future = client.scatter(fitted, broadcast=True) if fitted is not None else None
        base_pts = [p for p in points if p.policy == BASELINE and not p.knobs]
        rest = [p for p in points if p not in base_pts]
        needs_base = any(p.carbon_cap.needs_baseline for p in rest)
        baseline_carbon: dict[int, float] = {}

        def consume(futures: dict[Any, tuple[SweepPoint, float | None]]) -> None:
            for fut in as_completed(list(futures)):
                point, cap_kg = futures[fut]
                if fut.status == "error":
                    exc = fut.exception()
                    row = _row(point, cap_kg, None, "error", math.nan, None,
                               f"{type(exc).__name__}: {exc}")
                    log.warning("run %s failed: %s", point, row["message"])
                else:
                    result, elapsed = fut.result()
                    run_id = _store(db, result) if db is not None else None
                    status = "ok" if not result.warnings else "warnings"
                    row = _row(point, cap_kg, run_id, status, elapsed, result)
                    if point.policy == BASELINE and not point.knobs:
                        baseline_carbon[point.seed] = float(result.metrics["carbon_kg"])
                rows.append(row)
                if on_result is not None:
                    on_result(row)
                bar.update(1)

        def submit(pts: Sequence[SweepPoint]) -> dict[Any, tuple[SweepPoint, float | None]]:
            futures: dict[Any, tuple[SweepPoint, float | None]] = {}
            for p in pts:
                if p.carbon_cap.needs_baseline and p.seed not in baseline_carbon:
                    rows.append(_row(p, None, None, "skipped", math.nan, None,
                                     f"no {BASELINE} run for seed {p.seed} to set the cap"))
                    bar.update(1)
                    continue
                caps = p.carbon_cap.resolved(baseline_carbon.get(p.seed))
                spec = p.spec(scenario.name, forecast, sim, caps)
                fut = client.submit(run_point, sc_future, spec, fc_future, pure=False)
                futures[fut] = (p, caps.carbon_total_kg())
            return futures

        if needs_base:
            consume(submit(base_pts))
            consume(submit(rest))
        else:
            consume(submit(list(points)))
    finally:
        bar.close()
        client.close()
        if cluster is not None:
            cluster.close()
    table = _table(rows)
    if csv_path is not None:
        write_csv(table, csv_path)
        log.info("sweep table written to %s", csv_path)
    return table


# -- the cost-carbon frontier ----------------------------------------------------------------
HINDSIGHT = "offline"
"""The hindsight plan: its LP bound at each cap is the frontier's yardstick."""

FRONTIER_COLUMNS: tuple[str, ...] = (
    "carbon_cap", "carbon_cap_kg", "cost", "carbon_kg", "carbon_cap_met", "deadline_misses",
    "jobs_unfinished", "bound_cost", "bound_carbon_kg", "hindsight_cost",
    "hindsight_carbon_kg", "least_carbon_kg",
)
"""Columns of :func:`frontier_table`: the policy's run at each cap, then the hindsight
plan's LP bound (``bound_*``) and replay (``hindsight_*``) at the same cap, and the least
carbon achievable with every deadline met (a hindsight LP bound)."""


def frontier_points(policy: str, caps: Sequence[Caps], seeds: Sequence[int] = (0,)
                    ) -> list[SweepPoint]:
    """The frontier's grid: ``policy`` and the hindsight plan, uncapped and at each cap (a
    percentage adds the ``asap-home`` run it is taken below)."""
    if not _accepts(policy, "caps"):
        raise ValueError(f"policy {policy} takes no carbon cap; the frontier needs one that "
                         f"does: {', '.join(p for p in POLICY_NAMES if _accepts(p, 'caps'))}")
    if not caps:
        raise ValueError("the frontier needs at least one cap, e.g. 0%,5%,10%,20%")
    return sweep_points(list(dict.fromkeys([policy, HINDSIGHT])),
                        carbon_caps=list(dict.fromkeys([Caps(), *caps])), seeds=seeds)


def frontier_table(table: pd.DataFrame, policy: str, least_carbon_kg: float | None
                   ) -> pd.DataFrame:
    """One row per cap (uncapped first, then by budget, largest first) from a sweep of
    :func:`frontier_points`: means over seeds of the successful runs
    (:data:`FRONTIER_COLUMNS`). Cost in the scenario's currency, carbon in kg CO2."""
    ok = table[table["status"].isin(["ok", "warnings"])]
    mine = ok[ok["policy"] == policy]
    hind = ok[ok["policy"] == HINDSIGHT]
    rows = []
    for label, g in mine.groupby("carbon_cap", sort=False):
        h = hind[hind["carbon_cap"] == label]

        def mean(frame: pd.DataFrame, col: str) -> float:
            vals = frame[col].astype(float) if col in frame else pd.Series(dtype=float)
            return float(vals.mean()) if len(vals.dropna()) else math.nan

        met = g["carbon_cap_met"].dropna() if "carbon_cap_met" in g else pd.Series([])
        rows.append({
            "carbon_cap": label, "carbon_cap_kg": mean(g, "carbon_cap_kg"),
            "cost": mean(g, "cost"), "carbon_kg": mean(g, "carbon_kg"),
            "carbon_cap_met": bool(met.astype(bool).all()) if len(met) else None,
            "deadline_misses": mean(g, "deadline_misses"),
            "jobs_unfinished": mean(g, "jobs_unfinished"),
            "bound_cost": mean(h, "bound_cost"), "bound_carbon_kg": mean(h, "bound_carbon_kg"),
            "hindsight_cost": mean(h, "cost"), "hindsight_carbon_kg": mean(h, "carbon_kg"),
            "least_carbon_kg": math.nan if least_carbon_kg is None else float(least_carbon_kg),
        })
    out = pd.DataFrame(rows, columns=list(FRONTIER_COLUMNS))
    for col in ("deadline_misses", "jobs_unfinished"):
        # Counts stay whole numbers (the CSV writes 0, not 0.0) where every seed gave the
        # same count; a mean of 0.5 stays a fraction.
        vals = out[col].dropna()
        if len(vals) and (vals % 1 == 0).all():
            out[col] = out[col].astype("Int64")
    key = out["carbon_cap_kg"].fillna(math.inf)
    return out.iloc[(-key).argsort(kind="stable")].reset_index(drop=True)


def _connect(scheduler_address: str | None, n_workers: int, threads_per_worker: int,
             processes: bool) -> tuple[Any, Any]:
    """A Dask client of the scheduler at ``scheduler_address``, or of a new ``LocalCluster``
    on loopback (returned second, to be closed; None for an existing scheduler)."""
    from distributed import Client, LocalCluster

    if scheduler_address is not None:
        try:
            return Client(scheduler_address), None
        except (OSError, ValueError, TypeError) as exc:
            # Unreachable (OSError after the connect timeout) or not an address at all.
            raise SweepError(f"cannot reach the Dask scheduler {scheduler_address}: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__};"
                             " start it, or leave --scheduler out for a local cluster"
                             ) from None
    # Worker processes talk over loopback TCP; threads share the in-process transport.
    where = {"host": "127.0.0.1"} if processes else {}
    if not processes and n_workers * threads_per_worker > 1:
        # Pyomo's solver-output capture swaps the process's file descriptors and
        # deadlocks when two solves overlap in one process: threads run one at a time.
        log.warning("a threaded cluster runs one simulation at a time (Pyomo's "
                    "output capture is not thread-safe); use processes to parallelise")
        n_workers, threads_per_worker = 1, 1
    from workbench.config import bounded_workers

    n_workers = bounded_workers(n_workers, "local cluster")
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                           processes=processes, dashboard_address=None, **where)
    return Client(cluster), cluster


def _store(db: str | Path, result: RunResult) -> str:
    from workbench.store import Store

    meta = {**result.meta, "status": "sweep", "log": "\n".join(result.warnings)}
    with Store(db) as store:
        return store.save_run(meta, result.plan, result.migrations, result.slots,
                              result.metrics)


def _table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    for key in ROW_KEYS:
        if key not in table:
            table[key] = None
    metric_cols = [c for c in table.columns if c not in ROW_KEYS]
    table = table[list(ROW_KEYS) + metric_cols]
    order = ["policy", "V", "carbon_cap", "seed"]
    return table.sort_values(order, kind="stable", na_position="first").reset_index(drop=True)


__all__ = [
    "BASELINE",
    "FRONTIER_COLUMNS",
    "HINDSIGHT",
    "ROW_KEYS",
    "SweepPoint",
    "frontier_points",
    "frontier_table",
    "run_point",
    "run_sweep",
    "sweep_points",
]
