"""Tables the views draw, derived from a run's frames: pure pandas, tested without a browser."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from workbench.bill import BILL_PARTS
from workbench.caps import Caps
from workbench.equal_work import LikeForLike, like_for_like
from workbench.events import GridEvent, report
from workbench.policies import POLICY_NAMES
from workbench.quote import QUOTE_ORDERS, sort_quote  # noqa: F401 - the app's names
from workbench.runs import REFERENCE_POLICY, run_settings
from workbench.schema import site_key

COMPARE_COLUMNS: tuple[str, ...] = (
    "policy", "currency", "bill_total", "cost", "equal_work_cost", "saving_pct",
    "jobs_saving_pct", "bill_saving_pct", "above_bound_pct", "above_replay_pct", "carbon_kg",
    "equal_work_carbon_kg", "carbon_saving_pct", "energy_kwh", "mean_jct_h", "p95_jct_h",
    "deadline_misses", "jobs_unfinished", "unfinished_charge", "migrations",
    "energy_moved_kwh")
"""Columns of :func:`compare_table`, each row on equal work
(:func:`workbench.equal_work.like_for_like`): ``saving_pct`` (of the whole bill),
``jobs_saving_pct`` (of its part the plan controls, ``cost``) and ``carbon_saving_pct``
against ``asap-home`` (positive: cheaper or cleaner than it), ``bill_saving_pct`` the bills
alone, ``above_bound_pct`` the gap to the hindsight bound (the yardstick),
``above_replay_pct`` to the hindsight plan as replayed (a reference)."""

COUNT_COLUMNS: tuple[str, ...] = ("deadline_misses", "jobs_unfinished", "migrations")
"""Columns of :func:`compare_table` that count things (integers, empty where unknown)."""

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


def site_colors(scenario: Any) -> dict[str, str]:
    """One colour per datacenter of ``scenario`` for every chart (Gantt, occupancy, flows,
    grid curves): :func:`datacenter_colors` of its datacenters' names, and each grid region
    the colour of its first datacenter (so a region's price curve matches its site's bars).
    """
    out = datacenter_colors(d.name for d in scenario.datacenters)
    for d in sorted(scenario.datacenters, key=lambda d: d.name):
        out.setdefault(str(d.region), out[d.name])
    return out


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


def moved_gb(migrations: pd.DataFrame) -> pd.Series:
    """GB each data movement carried: ``transfer_gb`` (dataset and checkpoint), the
    checkpoint alone for a table from before datasets travelled."""
    gb = migrations["transfer_gb"] if "transfer_gb" in migrations else migrations[
        "checkpoint_gb"]
    return gb.fillna(migrations["checkpoint_gb"]).astype(float)


def migration_flows(plan: pd.DataFrame, migrations: pd.DataFrame,
                    start: datetime | None = None, end: datetime | None = None) -> pd.DataFrame:
    """Flows between datacenters: data movements, GB moved, and kWh of work that moved.

    Every row of the migrations table counts (a checkpoint move, or a job's dataset on its
    first placement away from home); GB is what travelled (``transfer_gb``: dataset and/or
    checkpoint). The kWh of a move is the energy the job drew at its destination from the
    move until it next moved or ended: the energy that followed the move.
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
    moves = moves.assign(kwh=kwh, gb=moved_gb(moves))
    out = moves.groupby(["from_region", "to_region"], as_index=False).agg(
        migrations=("job_id", "size"), gb=("gb", "sum"), kwh=("kwh", "sum"))
    return out[list(FLOW_COLUMNS)]


def _policy_order(name: str) -> tuple[int, str]:
    return (POLICY_NAMES.index(name) if name in POLICY_NAMES else len(POLICY_NAMES), name)


def run_comparison(policy: str, metrics: Mapping[str, Any],
                   baselines: Mapping[str, Mapping[str, Any]],
                   bound: Mapping[str, Any] | None = None) -> LikeForLike:
    """The run (``policy``, ``metrics``) against its comparison runs, on equal work: the
    one definition of :func:`workbench.equal_work.like_for_like` with asap-home as the
    baseline, ``bound`` (the hindsight bound) as the yardstick and the ``offline`` run (the
    hindsight plan replayed; the run itself when it is the hindsight plan) as reference."""
    runs = {**baselines, policy: metrics}
    return like_for_like(metrics, runs.get(REFERENCE_POLICY), bound, runs.get("offline"))


def compare_table(policy: str, metrics: Mapping[str, Any],
                  baselines: Mapping[str, Mapping[str, Any]],
                  bound: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """The run and each comparison policy, one row each: the run first, then the others in
    the order of :data:`workbench.policies.POLICY_NAMES` (stable between sessions).

    Each row is :func:`run_comparison` of that policy's metrics (:data:`COMPARE_COLUMNS`):
    NaN where a reference was not run; counts as integers.
    """
    others = sorted((n for n in baselines if n != policy), key=_policy_order)
    rows = []
    for name, m in [(policy, metrics), *((n, baselines[n]) for n in others)]:
        cmp = run_comparison(name, m, baselines, bound)
        rows.append({**m, "policy": name, "saving_pct": cmp.saving_pct,
                     "jobs_saving_pct": cmp.jobs_saving_pct,
                     "bill_saving_pct": cmp.bill_saving_pct,
                     "above_bound_pct": cmp.above_bound_pct,
                     "above_replay_pct": cmp.above_replay_pct,
                     "carbon_saving_pct": cmp.carbon_saving_pct})
    frame = pd.DataFrame(rows).reindex(columns=list(COMPARE_COLUMNS))
    for col in COMPARE_COLUMNS:
        if col not in ("policy", "currency", *COUNT_COLUMNS):
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    for col in COUNT_COLUMNS:
        frame[col] = pd.to_numeric(frame[col], errors="coerce").round().astype("Int64")
    frame["currency"] = frame["currency"].fillna(str(metrics.get("currency", "")))
    return frame


def tradeoff_frame(runs: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The V sweep: for each V, the latest Lyapunov run's cost, carbon, backlog and JCT.

    The caller picks the runs: the app passes only those that differ from the shown run in
    V alone (:func:`workbench.runs.differs_only_in`).

    ``runs`` is :meth:`workbench.store.Store.runs` (``knobs`` as JSON text); ``metrics`` maps
    run id to :meth:`~workbench.store.Store.run_metrics`. Backlog is the mean of the
    deadline-aware queue (``queue_mean:Y``, else ``queue_mean:R``), in fractions of work.
    Runs of another slot length than the latest run are left out.
    """
    cols = ["V", "cost", "carbon_kg", "backlog", "mean_jct_h", "run_id"]
    rows = []
    for r in runs.sort_values("created_utc").itertuples():
        # Knobs over the simulator's settings (the slot length is a setting).
        knobs = run_settings(r._asdict())
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


FRONTIER_FRAME_COLUMNS: tuple[str, ...] = (
    "policy", "carbon_cap_kg", "cost", "carbon_kg", "bound_cost", "bound_carbon_kg", "run_id")
"""Columns of :func:`frontier_frame` (cost in the scenario's currency, carbon in kg CO2)."""


def frontier_frame(runs: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]]
                   ) -> pd.DataFrame:
    """The cost-carbon frontier of stored runs: per policy and carbon cap (NaN: uncapped)
    the latest run's cost and carbon, and its hindsight bound's where it has one (the
    hindsight plan's LP at that cap: the frontier no plan can beat).

    The caller picks the runs (the app: the shown run's policy differing from it in the
    carbon cap alone, and the hindsight plan's runs); ``runs`` is
    :meth:`workbench.store.Store.runs`, ``metrics`` maps run id to its metrics.
    """
    rows = []
    for r in runs.sort_values("created_utc").itertuples():
        m = metrics.get(r.run_id, {})
        if "cost" not in m:
            continue
        cap = run_settings(r._asdict()).get("carbon_cap_kg")
        bound = _parse_bound(getattr(r, "bound", None))
        rows.append({"policy": r.policy,
                     "carbon_cap_kg": float(cap) if isinstance(cap, int | float) else math.nan,
                     "cost": float(m["cost"]), "carbon_kg": float(m.get("carbon_kg", math.nan)),
                     "bound_cost": float(bound.get("cost", math.nan)),
                     "bound_carbon_kg": float(bound.get("carbon_kg", math.nan)),
                     "run_id": r.run_id})
    if not rows:
        return pd.DataFrame(columns=list(FRONTIER_FRAME_COLUMNS))
    frame = pd.DataFrame(rows)
    frame["_cap"] = frame["carbon_cap_kg"].fillna(-1.0)
    frame = frame.drop_duplicates(["policy", "_cap"], keep="last")
    return (frame.sort_values(["policy", "carbon_kg"]).drop(columns="_cap")
            .reset_index(drop=True)[list(FRONTIER_FRAME_COLUMNS)])


def _parse_bound(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value:
        import json

        parsed = json.loads(value)
        return parsed if isinstance(parsed, dict) else {}
    return {}


def cap_status(result: Any) -> list[dict[str, Any]]:
    """Each carbon cap of a run and whether it was met: ``scope`` (``all`` or a datacenter),
    ``cap_kg``, ``carbon_kg`` (the run's metered carbon) and ``met``.

    ``carbon_cap_met`` in the metrics, where the metrics give it, decides the global cap;
    otherwise ``met = carbon_kg <= cap_kg`` (per datacenter from the ``carbon_kg:<dc>`` slot
    columns).
    """
    caps = Caps.from_stored(result.meta.get("knobs"))
    if not caps.has_carbon:
        return []
    m = result.metrics
    if caps.carbon_kg_by_dc:
        out = []
        for dc, kg in sorted(caps.carbon_kg_by_dc.items()):
            col = f"carbon_kg:{dc}"
            used = float(result.slots[col].sum()) if col in result.slots else math.nan
            out.append({"scope": str(dc), "cap_kg": float(kg), "carbon_kg": used,
                        "met": bool(used <= float(kg) * (1 + 1e-9))})
        return out
    used = float(m.get("carbon_kg", math.nan))
    met = m.get("carbon_cap_met")
    cap = float(caps.carbon_kg or 0.0)
    return [{"scope": "all", "cap_kg": cap, "carbon_kg": used,
             "met": bool(met) if met is not None else bool(used <= cap * (1 + 1e-9))}]


_UTC_STAMP = re.compile(r"\b(\d{4}-\d{2}-\d{2} \d{2}:\d{2}) UTC\b")
"""A time as the library writes it in a message: ``2025-07-13 16:15 UTC``."""


def in_zone(text: str, tz: str) -> str:
    """``text`` with every ``YYYY-MM-DD HH:MM UTC`` time in it written in zone ``tz``
    (``2025-07-14 00:15 Asia/Shanghai``): the library writes its messages in UTC, the app
    shows every time in the sidebar's zone."""
    if not tz or tz == "UTC":
        return text

    def local(m: re.Match[str]) -> str:
        stamp = pd.Timestamp(m.group(1), tz="UTC").tz_convert(tz)
        return f"{stamp:%Y-%m-%d %H:%M} {tz}"

    return _UTC_STAMP.sub(local, text)


def default_zone(datacenters: Iterable[Any], when: datetime | None = None) -> str:
    """The time zone most datacenters are in; a tie goes to the tied zone whose UTC offset
    (at ``when``, default now) is nearest the mean offset of all the sites, then by name
    (four sites in Los Angeles, Chicago, New York and Berlin: New York)."""
    zones = [str(d.timezone) for d in datacenters]
    if not zones:
        return "UTC"
    counts = pd.Series(zones).value_counts()
    tied = sorted(counts[counts == counts.max()].index)
    if len(tied) == 1:
        return str(tied[0])
    at = pd.Timestamp(when if when is not None else pd.Timestamp.now("UTC"))
    at = at.tz_localize("UTC") if at.tzinfo is None else at

    def offset_h(zone: str) -> float:
        off = at.tz_convert(zone).utcoffset()
        return 0.0 if off is None else off.total_seconds() / 3600.0

    mean = sum(offset_h(z) for z in zones) / len(zones)
    return min(tied, key=lambda z: (abs(offset_h(z) - mean), z))


def run_warnings(result: Any, tz: str = "UTC") -> list[str]:
    """What the operator must see beside a run's results: missed caps, unfinished jobs,
    deadline misses, power-cap violations and the simulator's own warnings, their times in
    zone ``tz`` (:func:`in_zone`)."""
    m = result.metrics
    out = []
    # The simulator reports a missed cap in the run's warnings (below); per-datacenter caps
    # are judged here.
    metered = any("carbon cap" in str(w) for w in result.warnings)
    for c in cap_status(result):
        if not c["met"] and not (metered and c["scope"] == "all"):
            where = "" if c["scope"] == "all" else f" in {c['scope']}"
            out.append(f"carbon cap missed{where}: {c['carbon_kg']:,.1f} kg against a cap of "
                       f"{c['cap_kg']:,.1f} kg (+{c['carbon_kg'] - c['cap_kg']:,.1f} kg)")
    unfinished = int(m.get("jobs_unfinished") or 0)
    if unfinished and not any("unfinished" in str(w) for w in result.warnings):
        out.append(f"{unfinished} training job(s) unfinished at the end of the horizon")
    misses = int(m.get("deadline_misses") or 0)
    if misses:
        out.append(f"{misses} deadline miss(es)")
    violations = m.get("power_cap_violations")
    if violations and not any("power cap" in str(w) for w in result.warnings):
        out.append(f"power cap exceeded in {int(violations)} slot(s)")
    seen = set(out)
    for w in result.warnings:
        if w not in seen:
            out.append(str(w))
            seen.add(w)
    return [in_zone(w, tz) for w in out]


def job_groups(segments: pd.DataFrame, by: str) -> pd.Series:
    """The group of each job of :func:`gantt_segments`: the datacenter (``by="datacenter"``)
    or pool (``"pool"``, ``datacenter/GPU type``) where it ran longest; ``""`` for ``none``."""
    if segments.empty or by == "none":
        return pd.Series("", index=pd.Index(segments["job_id"].unique(), name="job_id"))
    key = (segments["region"] if by == "datacenter"
           else segments["region"] + "/" + segments["gpu_type"].astype(str))
    longest = (segments.assign(group=key).groupby(["job_id", "group"])["slots"].sum()
               .reset_index().sort_values(["job_id", "slots"], ascending=[True, False])
               .drop_duplicates("job_id"))
    return longest.set_index("job_id")["group"]


def filter_segments(segments: pd.DataFrame, *, search: str = "", kind: str = "all jobs",
                    start: datetime | None = None, end: datetime | None = None
                    ) -> pd.DataFrame:
    """Segments of jobs whose id contains ``search`` (case-insensitive; several terms
    separated by commas or spaces match any), of ``kind`` and overlapping ``[start, end]``."""
    out = segments
    if kind not in ("all jobs", "") and "kind" in out:
        out = out[out["kind"] == kind]
    terms = [t for t in search.replace(",", " ").lower().split() if t]
    if terms:
        ids = out["job_id"].astype(str).str.lower()
        out = out[ids.apply(lambda i: any(t in i for t in terms))]
    if start is not None:
        out = out[out["end"] > pd.Timestamp(start)]
    if end is not None:
        out = out[out["start"] < pd.Timestamp(end)]
    return out.reset_index(drop=True)


def pool_capacity(scenario: Any) -> dict[str, int]:
    """GPUs per pool, ``datacenter/GPU type`` -> count (the occupancy plot's capacity lines)."""
    return {f"{p.datacenter}/{p.gpu_type}": int(p.count) for p in scenario.pools}


def migration_reasons(migrations: pd.DataFrame, plan: pd.DataFrame, scenario: Any
                      ) -> list[str]:
    """Why each migration happened, in words, from the prices and carbon the run saw.

    For a move from ``a`` to ``b`` in slot ``t``: the price and carbon intensity of both
    grids in ``t``, the energy the move cost (``transfer_gb x link kWh/GB``: dataset and
    checkpoint; none when the link has no figure) and its payback time,
    ``move kWh x price_b / (P x (price_a - price_b))`` hours with ``P`` the job's draw in kW
    in its first slot at ``b``. A move that does not pay back on price says why it moved
    (carbon, else capacity or a deadline).
    """
    if migrations.empty:
        return []
    region = {d.name: d.region for d in scenario.datacenters}
    cube = scenario.grid
    times = pd.DatetimeIndex(pd.to_datetime(cube["time"].values)).tz_localize("UTC")
    series = {(var, r): np.asarray(cube[var].sel(region=r).values, dtype=float)
              for var in ("price_per_kwh", "carbon_g_per_kwh") for r in set(region.values())}
    where = times.get_indexer(pd.DatetimeIndex(pd.to_datetime(migrations["slot_start"],
                                                              utc=True)), method="ffill")
    slot_h = scenario.slot_s / 3600.0
    runs = plan[plan["n_gpus"] > 0] if "n_gpus" in plan else plan
    first_at: dict[tuple[str, Any], float] = {}
    for rec in runs[["job_id", "slot_start", "energy_kwh"]].itertuples(index=False):
        first_at.setdefault((str(rec.job_id), pd.Timestamp(rec.slot_start)),
                            float(rec.energy_kwh or 0.0))
    cur = scenario.currency
    moved = moved_gb(migrations)
    out = []
    for n, (mv, i) in enumerate(zip(migrations.itertuples(index=False), where, strict=True)):
        t = pd.Timestamp(mv.slot_start)
        src, dst = str(mv.from_region), str(mv.to_region)
        if i < 0 or src not in region or dst not in region:
            out.append(str(getattr(mv, "reason", "") or ""))
            continue

        def at(var: str, dc: str, i: int = int(i)) -> float:
            return float(series[(var, region[dc])][i])

        pa, pb = at("price_per_kwh", src), at("price_per_kwh", dst)
        ca, cb = at("carbon_g_per_kwh", src), at("carbon_g_per_kwh", dst)
        carbon = (f"{abs(100 * (1 - cb / ca)):.0f} % {'less' if cb < ca else 'more'} carbon"
                  if ca > 0 else f"{cb:.0f} vs {ca:.0f} gCO2/kWh")
        text = f"price {pb:.2f} vs {pa:.2f} {cur}/kWh and {carbon} in {dst}"
        link = scenario.link(src, dst) if hasattr(scenario, "link") else None
        per_gb = float(getattr(link, "transfer_energy_kwh_per_gb", 0.0) or 0.0)
        gb = float(moved.iloc[n])
        move_kwh = gb * per_gb
        kw = first_at.get((str(mv.job_id), t), 0.0) / slot_h
        if move_kwh > 0:
            text += f"; the move costs {move_kwh:.2f} kWh ({gb:,.1f} GB)"
        elif gb > 0:
            text += f"; moves {gb:,.1f} GB"
        if pa > pb and kw > 0:
            hours = move_kwh * pb / (kw * (pa - pb)) if move_kwh > 0 else 0.0
            text += (f", pays back in {hours:.1f} h" if hours >= 0.05
                     else ", pays back within the slot")
        elif pa <= pb:
            text += ("; not cheaper: moved for the lower carbon" if cb < ca else
                     "; neither cheaper nor cleaner: moved for capacity or the deadline")
        out.append(text)
    return out


def energy_by_datacenter(plans: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """kWh each run drew per datacenter: one row per datacenter, one column per run."""
    cols = {name: plan.groupby("region")["energy_kwh"].sum() for name, plan in plans.items()
            if not plan.empty}
    if not cols:
        return pd.DataFrame()
    frame = pd.DataFrame(cols).fillna(0.0)
    frame.index.name = "datacenter"
    return frame.reset_index()


def run_summary(res: Any, tz: str, notes: Iterable[str] = ()) -> tuple[str, str]:
    """The message box's line for a finished run: its cost, carbon, deadline misses and
    migrations, how many warnings it has (their text is in the banner, once) and the
    ``notes`` of what did not run; with the message kind (``success`` or ``warning``)."""
    m = res.metrics
    n = len(run_warnings(res, tz))
    notes = list(notes)
    text = (f"{res.policy}: cost {m['cost']:,.2f} {m.get('currency', '')}, carbon "
            f"{m['carbon_kg']:,.1f} kg, {int(m['deadline_misses'])} deadline misses, "
            f"{int(m['migrations'])} migrations")
    if n:
        text += f". {n} warning{'s' * (n != 1)}: see “Warnings of this run” above the results"
    text += "".join(f". {'; '.join(notes)}" for _ in notes[:1])
    return text, "warning" if n or notes else "success"


def missing_references(baseline_policies: Iterable[str]) -> dict[str, str]:
    """Why a shown run lacks asap-home (the saving's reference) or the hindsight bound, in
    the sidebar's terms: selected under Compare with (``baseline_policies``) but not run with
    this run's settings (a stored run opened without it, comparisons cancelled), or not
    selected."""
    chosen = set(baseline_policies)
    out = {}
    for key, policy, what in (("asap-home", "asap-home", "No saving against asap-home"),
                              ("bound", "offline", "No hindsight bound")):
        out[key] = (f"{what} yet: {policy} is selected under Compare with but has not "
                    "run with this run's settings; press Run to run it." if policy in chosen
                    else f"{what}: add {policy} under Compare with and press Run.")
    return out


SUPPLY_PARTS: tuple[tuple[str, str], ...] = (
    ("renewable_kwh", "renewables"), ("discharge_kwh", "battery"), ("grid_kwh", "grid"),
    ("curtailed_kwh", "curtailed"))
"""A site's meter fields (:data:`workbench.schema.SITE_SLOT`) in the supply chart."""


def supply_frame(slots: pd.DataFrame, datacenter: str, slot_s: float) -> pd.DataFrame:
    """One datacenter's supply per slot in kW (a slot's kWh over its hours): ``time``, one
    column per name of :data:`SUPPLY_PARTS`, ``load`` (the site's load) and ``charging``
    (into its battery). The three first parts add up to ``load + charging`` (the balance of
    :func:`workbench.outcome.site_balance`). Empty when the run has no supply columns (a run
    stored before supply existed)."""
    if slots is None or site_key("grid_kwh", datacenter) not in slots:
        return pd.DataFrame(columns=["time", *(n for _, n in SUPPLY_PARTS), "load",
                                     "charging"])
    hours = float(slot_s) / 3600.0
    out = pd.DataFrame({"time": pd.to_datetime(slots["time"], utc=True)})
    for col, name in SUPPLY_PARTS:
        out[name] = slots[site_key(col, datacenter)].astype(float) / hours
    # The meter's load: the jobs and the site's idle load (kW).
    out["load"] = slots[site_key("load_kw", datacenter)].astype(float)
    out["charging"] = slots[site_key("charge_kwh", datacenter)].astype(float) / hours
    return out.reset_index(drop=True)


BILL_COLUMNS: tuple[str, ...] = ("datacenter", *(p.replace("_", " ") + " ({c})" for p in
                                                  BILL_PARTS),
                                 "total ({c})", "peak grid kW", "peak at ({tz})")
"""Columns of :func:`bill_table` (``{c}``: the scenario's currency, ``{tz}`` the zone)."""


def bill_table(metrics: Mapping[str, Any], datacenters: Iterable[str],
               currency: str, tz: str = "UTC") -> pd.DataFrame:
    """The bill per datacenter from a run's metrics (:func:`workbench.bill.bill_metrics`):
    its parts (:data:`workbench.bill.BILL_PARTS`), their total, the peak grid import and
    when (in zone ``tz``); a last row ``all`` with the sums. Empty for a run without its
    meter."""
    names = [str(d) for d in datacenters]
    cols = [c.format(c=currency, tz=tz) for c in BILL_COLUMNS]
    if metrics.get("bill_total") is None or not names:
        return pd.DataFrame(columns=cols)
    rows = []
    for n in names:
        when = metrics.get(f"peak_time:{n}")
        at = "" if not when else f"{pd.Timestamp(when).tz_convert(tz):%Y-%m-%d %H:%M}"
        rows.append([n, *(float(metrics.get(f"bill_{p}:{n}") or 0.0) for p in BILL_PARTS),
                     float(metrics.get(f"bill_total:{n}") or 0.0),
                     float(metrics.get(f"peak_kw:{n}") or 0.0), at])
    rows.append(["all", *(float(metrics.get(f"bill_{p}") or 0.0) for p in BILL_PARTS),
                 float(metrics["bill_total"]), math.nan, ""])
    return pd.DataFrame(rows, columns=cols)


# -- grid events and the flexibility envelope --------------------------------------------
def run_events(meta: Mapping[str, Any]) -> tuple[GridEvent, ...]:
    """The grid events a run held, from its knobs: the caps it ran under, as the store keeps
    them and ``runs show`` lists them (:meth:`workbench.caps.Caps.from_stored`; each
    event's limit resolved to kW, the scenario's own events included).

    Raises ValueError for stored events the library refuses (the message names them)."""
    return Caps.from_stored(meta.get("knobs") or {}).events


EVENT_WINDOW_COLUMNS: tuple[str, ...] = ("datacenter", "name", "start", "end", "limit_kw")
"""Columns of :func:`event_windows` (times UTC)."""


def event_windows(events: Iterable[GridEvent], scenario: Any,
                  datacenter: str | None = None) -> pd.DataFrame:
    """Each event's window (UTC) and import limit (kW) at its site, those of ``datacenter``
    alone when given: what the Supply chart shades."""
    rows = []
    for ev in events:
        if datacenter is not None and ev.datacenter != datacenter:
            continue
        start = pd.Timestamp(ev.starts_at(scenario))
        rows.append({"datacenter": ev.datacenter, "name": ev.label, "start": start,
                     "end": start + pd.Timedelta(hours=float(ev.hours)),
                     "limit_kw": float(ev.limit_kw) if ev.limit_kw is not None else math.nan})
    return pd.DataFrame(rows, columns=list(EVENT_WINDOW_COLUMNS))


def event_rows(result: Any, scenario: Any) -> list[dict[str, Any]]:
    """A run's grid events with their verdicts: the run's own report (``meta
    ["grid_events"]``, :func:`workbench.runner.settle_events`: shed kWh, extra cost and
    payment against the same run without the events; stored with the run), else, for a
    run stored before the report was kept, :func:`workbench.events.report` of its events
    on its stored meter (met and the largest import against the limit; what was shed is
    unknown without the twin: None). Empty when the run held no event."""
    rows = result.meta.get("grid_events")
    if rows:
        return [dict(r) for r in rows]
    held = tuple(e for e in run_events(result.meta) if e.limit_kw is not None)
    names = [d.name for d in scenario.datacenters]
    if not held or result.slots is None or site_key("grid_import_kw", names[0]) not in (
            result.slots):
        return []
    from workbench.bill import site_array

    return report(scenario, held, site_array(result.slots, "grid_import_kw", names))


EVENT_TABLE_COLUMNS: tuple[str, ...] = (
    "event", "datacenter", "start ({tz})", "hours", "notice (h)", "limit (kW)",
    "max import (kW)", "kept", "shed (kWh)", "extra cost ({c})", "payment ({c})",
    "new misses")
"""Columns of :func:`event_table` (``{c}`` the currency, ``{tz}`` the zone)."""


def event_table(rows: Iterable[Mapping[str, Any]], currency: str, tz: str = "UTC"
                ) -> pd.DataFrame:
    """The events' report (:func:`event_rows`) as the app shows it: one row per event, kept
    or MISSED, the largest import against the limit, and against the same run without the
    event the kWh shed, the extra cost and the payment (empty where unknown)."""
    cols = [c.format(c=currency, tz=tz) for c in EVENT_TABLE_COLUMNS]
    out = []
    for r in rows:
        start = pd.Timestamp(r["start"])
        start = start.tz_localize("UTC") if start.tzinfo is None else start
        misses = r.get("new_misses")
        out.append([r["name"], r["datacenter"], f"{start.tz_convert(tz):%Y-%m-%d %H:%M}",
                    float(r["hours"]), float(r["notice_hours"]), float(r["limit_kw"]),
                    float(r["max_import_kw"]), "kept" if r["met"] else "MISSED",
                    _maybe(r.get("shed_kwh")), _maybe(r.get("extra_cost")),
                    _maybe(r.get("payment")),
                    "" if misses is None else (", ".join(misses) or "none")])
    return pd.DataFrame(out, columns=cols)


def _maybe(value: Any) -> float:
    return math.nan if value is None else float(value)


def offers_frame(offers: pd.DataFrame, tz: str = "UTC") -> pd.DataFrame:
    """The offers (:data:`workbench.flexibility.OFFER_COLUMNS`) with ``start_local``, each
    start as wall-clock time in ``tz`` (naive: bokeh draws it as it is): the heatmap's
    table."""
    t = pd.to_datetime(offers["start"], utc=True)
    return offers.assign(start_local=t.dt.tz_convert(tz).dt.tz_localize(None))


def cost_curve_frame(points: Iterable[tuple[float, float]]) -> pd.DataFrame:
    """:meth:`workbench.flexibility.Envelope.cost_curve`'s points as a table: ``kw_shed``,
    ``extra_cost``."""
    return pd.DataFrame(list(points), columns=["kw_shed", "extra_cost"], dtype=float)
