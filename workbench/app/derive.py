"""Tables the views draw, derived from a run's frames: pure pandas, tested without a browser."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

COMPARE_COLUMNS: tuple[str, ...] = (
    "policy", "cost", "cost_saving_pct", "cost_vs_offline_pct", "carbon_kg",
    "carbon_saving_pct", "energy_kwh", "mean_jct_h", "p95_jct_h", "deadline_misses",
    "jobs_unfinished", "migrations", "energy_moved_kwh",
)
"""Columns of :func:`compare_table`: savings are relative to ``asap-home`` (positive: cheaper
or cleaner than it), ``cost_vs_offline_pct`` is the excess over the hindsight plan's
(replayed) cost."""

PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
)
"""Colours given to datacenters, in the order of their sorted names (Category10)."""

FLOW_COLUMNS: tuple[str, ...] = ("from_region", "to_region", "migrations", "gb", "kwh")
"""Columns of :func:`migration_flows`."""


def datacenter_colors(names: Iterable[str]) -> dict[str, str]:
    """One colour per datacenter (or region), stable: sorted names take :data:`PALETTE` in
    turn, cycling past ten."""
    unique = sorted({str(n) for n in names})
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(unique)}


def time_zones(cube: xr.Dataset) -> list[str]:
    """Time zones the grid can be shown in: ``UTC`` and the regions' zones (cube attrs)."""
    zones = sorted(set(dict(cube.attrs.get("timezones", {})).values()) - {"UTC"})
    return ["UTC", *zones]


def grid_long(cube: xr.Dataset, tz: str = "UTC") -> pd.DataFrame:
    """The cube as rows ``time, region, price_per_kwh, carbon_g_per_kwh``.

    ``time`` is the slot start in zone ``tz`` (timezone-aware; the cube's clock is UTC).
    """
    frame = cube[["price_per_kwh", "carbon_g_per_kwh"]].to_dataframe().reset_index()
    frame["time"] = pd.to_datetime(frame["time"]).dt.tz_localize("UTC").dt.tz_convert(tz)
    frame["region"] = frame["region"].astype(str)
    return frame


def job_order(segments: pd.DataFrame) -> list[str]:
    """Jobs of :func:`gantt_segments` by first start (then id): the Gantt's rows, top down."""
    if segments.empty:
        return []
    first = segments.groupby("job_id")["start"].min().reset_index()
    return list(first.sort_values(["start", "job_id"])["job_id"].astype(str))


def gantt_segments(plan: pd.DataFrame) -> pd.DataFrame:
    """Placements merged into segments: consecutive slots of a job in one configuration.

    Returns
    -------
    DataFrame
        ``job_id, kind, region, gpu_type, n_gpus, batch_size, start, end, slots, energy_kwh,
        cost, carbon_kg, actions``, one row per segment, ordered by job and start.
    """
    cols = ["job_id", "kind", "region", "gpu_type", "n_gpus", "batch_size", "start", "end",
            "slots", "energy_kwh", "cost", "carbon_kg", "actions"]
    run = plan[plan["n_gpus"] > 0].sort_values(["job_id", "slot_start"])
    if run.empty:
        return pd.DataFrame(columns=cols)
    key = ["job_id", "region", "gpu_type", "n_gpus"]
    changed = (run[key] != run[key].shift()).any(axis=1)
    gap = run["slot_start"] != run["slot_end"].shift()
    seg = (changed | gap).cumsum().rename("segment")
    kind = run["kind"] if "kind" in run else pd.Series("", index=run.index)
    out = run.assign(kind=kind).groupby(seg).agg(
        job_id=("job_id", "first"), kind=("kind", "first"), region=("region", "first"),
        gpu_type=("gpu_type", "first"), n_gpus=("n_gpus", "first"),
        batch_size=("batch_size", "last"), start=("slot_start", "first"),
        end=("slot_end", "last"), slots=("slot_start", "size"),
        energy_kwh=("energy_kwh", "sum"), cost=("cost", "sum"), carbon_kg=("carbon_kg", "sum"),
        actions=("action", lambda a: ",".join(dict.fromkeys(a))),
    )
    return out.reset_index(drop=True)[cols]


def occupancy_long(slots: pd.DataFrame) -> pd.DataFrame:
    """Busy GPUs per pool and slot: rows ``time, pool, gpus_busy`` from ``gpus_busy:*``."""
    pools = [c for c in slots.columns if c.startswith("gpus_busy:")]
    if not pools or slots.empty:
        return pd.DataFrame(columns=["time", "pool", "gpus_busy"])
    wide = slots[["time", *pools]].rename(columns={c: c.split(":", 1)[1] for c in pools})
    out = wide.melt(id_vars="time", var_name="pool", value_name="gpus_busy")
    out["gpus_busy"] = out["gpus_busy"].astype(float)
    return out


def _in_window(times: pd.Series, start: datetime | None, end: datetime | None) -> pd.Series:
    mask = pd.Series(True, index=times.index)
    if start is not None:
        mask &= times >= pd.Timestamp(start)
    if end is not None:
        mask &= times <= pd.Timestamp(end)
    return mask


def filter_migrations(migrations: pd.DataFrame, start: datetime | None = None,
                      end: datetime | None = None) -> pd.DataFrame:
    """Migrations whose slot starts within ``[start, end]`` (either bound optional)."""
    return migrations[_in_window(migrations["slot_start"], start, end)].reset_index(drop=True)


def migration_flows(plan: pd.DataFrame, migrations: pd.DataFrame,
                    start: datetime | None = None, end: datetime | None = None) -> pd.DataFrame:
    """Flows between datacenters: moves, GB of checkpoints, and kWh of work that moved.

    The kWh of a move is the energy the job drew at its destination from the move until it
    next moved or ended: the energy that followed the move.
    """
    moves = filter_migrations(migrations, start, end)
    if moves.empty:
        return pd.DataFrame(columns=list(FLOW_COLUMNS))
    run = plan[plan["n_gpus"] > 0].sort_values(["job_id", "slot_start"])
    kwh = np.zeros(len(moves))
    by_job = {job: g for job, g in run.groupby("job_id")}
    for i, mv in moves.iterrows():
        rows = by_job.get(mv["job_id"])
        if rows is None:
            continue
        after = rows[rows["slot_start"] >= mv["slot_start"]]
        stay = (after["region"] == mv["to_region"]).cumprod().astype(bool)
        kwh[i] = float(after.loc[stay, "energy_kwh"].sum())
    moves = moves.assign(kwh=kwh)
    out = moves.groupby(["from_region", "to_region"], as_index=False).agg(
        migrations=("job_id", "size"), gb=("checkpoint_gb", "sum"), kwh=("kwh", "sum"))
    return out[list(FLOW_COLUMNS)]


def compare_table(policy: str, metrics: Mapping[str, Any],
                  baselines: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The run and each comparison policy, one row each (the run first).

    ``cost_saving_pct = 100 (1 - cost / cost[asap-home])`` (likewise for carbon) and
    ``cost_vs_offline_pct = 100 (cost / cost[offline] - 1)``; NaN where the reference policy
    was not run.
    """
    rows = [{"policy": policy, **metrics}]
    rows += [{"policy": name, **m} for name, m in baselines.items() if name != policy]
    frame = pd.DataFrame(rows).reindex(columns=list(COMPARE_COLUMNS))
    by_name = {str(r["policy"]): r for r in rows}
    asap, offline = by_name.get("asap-home"), by_name.get("offline")
    for metric, col in (("cost", "cost_saving_pct"), ("carbon_kg", "carbon_saving_pct")):
        base = float(asap[metric]) if asap is not None else math.nan
        frame[col] = (100.0 * (1.0 - frame[metric].astype(float) / base)
                      if base and math.isfinite(base) else math.nan)
    best = float(offline["cost"]) if offline is not None else math.nan
    frame["cost_vs_offline_pct"] = (100.0 * (frame["cost"].astype(float) / best - 1.0)
                                    if best and math.isfinite(best) else math.nan)
    return frame


def savings_summary(table: pd.DataFrame) -> dict[str, float]:
    """The run's (first row of :func:`compare_table`) savings, as numbers for the headline.

    Keys: ``cost_saving_pct``, ``carbon_saving_pct`` (against asap-home),
    ``cost_vs_offline_pct`` (excess over the hindsight plan, replayed), and ``cost_saved`` (in the
    run's currency against asap-home); NaN where a reference is missing.
    """
    if table.empty:
        return {}
    run = table.iloc[0]
    asap = table[table["policy"] == "asap-home"]
    saved = (float(asap["cost"].iloc[0]) - float(run["cost"])) if len(asap) else math.nan
    return {"cost_saving_pct": float(run["cost_saving_pct"]),
            "carbon_saving_pct": float(run["carbon_saving_pct"]),
            "cost_vs_offline_pct": float(run["cost_vs_offline_pct"]),
            "cost_saved": saved}


def tradeoff_frame(runs: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The V sweep: for each V, the latest Lyapunov run's cost, carbon, backlog and JCT.

    ``runs`` is :meth:`workbench.store.Store.runs` (``knobs`` as JSON text); ``metrics`` maps
    run id to :meth:`~workbench.store.Store.run_metrics`. Backlog is the mean of the
    deadline-aware queue (``queue_mean:Y``, else ``queue_mean:R``), in fractions of work.
    Runs of another slot length than the latest run are left out.
    """
    cols = ["V", "cost", "carbon_kg", "backlog", "mean_jct_h", "run_id"]
    rows = []
    for r in runs.sort_values("created_utc").itertuples():
        try:
            knobs = json.loads(r.knobs) if isinstance(r.knobs, str) else dict(r.knobs or {})
        except (TypeError, ValueError):
            continue
        m = metrics.get(r.run_id, {})
        if "V" not in knobs or "cost" not in m:
            continue
        backlog = m.get("queue_mean:Y", m.get("queue_mean:R", math.nan))
        rows.append({"V": float(knobs["V"]), "cost": m["cost"], "carbon_kg": m.get("carbon_kg"),
                     "backlog": backlog, "mean_jct_h": m.get("mean_jct_h"),
                     "run_id": r.run_id, "slot_s": knobs.get("slot_s")})
    if not rows:
        return pd.DataFrame(columns=cols)
    frame = pd.DataFrame(rows)
    latest = frame["slot_s"].iloc[-1]
    frame = frame[frame["slot_s"].isna() | (frame["slot_s"] == latest)] if pd.notna(
        latest) else frame
    frame = frame.drop_duplicates("V", keep="last").sort_values("V")
    return frame[cols].reset_index(drop=True)
