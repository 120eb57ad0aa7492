"""The store's runs: one row per simulated run, its plan rows, migrations, per-slot records
and metrics (:data:`workbench.schema.PLAN_ROW`, :data:`workbench.schema.MIGRATION`)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.store.base import Connection, StoreBase, insert_frame, is_null, now_utc, py
from workbench.store.errors import StoreError
from workbench.store.schema import MIGRATIONS, PLAN_ROWS

RUN_SETTINGS: tuple[str, ...] = (
    "forecast_mode", "forecast_error", "forecast_model", "forecast_revise", "noise", "seed",
    "restart_s", "resize_s", "slot_s", "n_slots", "ignore", "power_limits", "spec_key",
    "carbon_cap_pct", "grid_events",
)
"""Keys of a run's ``meta`` kept in the ``settings`` column (what made the run, besides
the policy's knobs; ``spec_key`` a stored baseline's :func:`workbench.runner.spec_key`;
``grid_events`` the events' report against the run without them,
:func:`workbench.runner.settle_events`)."""

RUN_SUMMARY_METRICS: tuple[str, ...] = (
    "cost", "carbon_kg", "energy_kwh", "deadline_misses", "jobs_unfinished", "migrations",
    "mean_jct_h",
)
"""Metrics :meth:`RunTables.run_summaries` puts beside each run."""

RUN_TABLES: tuple[str, ...] = ("runs", "plan_rows", "migrations", "slot_rows", "run_metrics")
"""The tables holding a run, each keyed by ``run_id``."""

RunFrames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]

_SIDE_FIX = ("its runs cannot be copied: run those plans again with `workbench plan`; "
             "nothing was copied")


def check_side_file(path: str | Path) -> None:
    """Refuse a side file (:func:`workbench.recorders.save_results`) that is no whole store:
    a folder, a file of another kind, one cut short, or one of a newer schema."""
    p = Path(path)
    if not p.is_file():
        raise StoreError(f"{p}: no such store file; pass the side file a plan named")
    with StoreBase(p, read_only=True, what="side file", fix=_SIDE_FIX):
        pass  # a damaged, foreign or newer file fails here


RESERVED_RUN_REFS: tuple[str, ...] = ("latest",)
"""Words :meth:`RunTables.resolve_run` reads as something other than a name or an id."""


RUN_NAME_CHARS = 64
"""Longest run name: it fits a column of ``runs compare`` and a line of ``runs list``."""


class RunTables(StoreBase):
    """Runs: store (one transaction per batch), copy from a side file, list, read, rename,
    delete."""

    def save_run(self, meta: dict[str, Any], plan: pd.DataFrame, migrations: pd.DataFrame,
                 slots: pd.DataFrame, metrics: dict[str, Any]) -> str:
        """Store one simulator run; returns its ``run_id``.

        ``meta`` needs ``scenario`` and ``policy``; ``knobs`` (a dict), ``status`` and
        ``log`` (text, e.g. solver warnings) are optional. ``metrics`` values that are
        numbers land in ``value``, others as JSON in ``text``.
        """
        return self.save_runs([(meta, plan, migrations, slots, metrics)])[0]

    def save_runs(
        self,
        runs: Sequence[tuple[dict[str, Any], pd.DataFrame, pd.DataFrame, pd.DataFrame,
                             dict[str, Any]]],
    ) -> list[str]:
        """Store several runs (e.g. a plan and its baseline) in one transaction: all or
        none. Each entry is ``(meta, plan, migrations, slots, metrics)`` as for
        :meth:`save_run`; returns the run ids in order."""
        frames = [run_frames(*run) for run in runs]
        with self.transaction() as con:
            for parts in frames:
                for table, frame in zip(RUN_TABLES, parts, strict=True):
                    insert_frame(con, table, frame)
        return [str(f[0]["run_id"].iloc[0]) for f in frames]

    def copy_runs_from(self, path: str | Path) -> list[str]:
        """Copy every run of another store file (e.g. a side file written while this store
        was locked) into this one in one transaction; runs already here are skipped.
        Returns the ids copied. A side file that is no whole store is refused first
        (:func:`check_side_file`) and this store is left as it was."""
        check_side_file(path)
        other = str(Path(path).resolve()).replace("'", "''")
        # Reading the side file goes through its own guard: damage found there is the side
        # file's, not this store's.
        side = Connection(self.con.raw, str(path), read_only=True, what="side file",
                          fix=_SIDE_FIX)
        self.con.execute(f"ATTACH '{other}' AS side (READ_ONLY)")
        try:
            with self.transaction():
                ids = [r[0] for r in side.execute(
                    "SELECT run_id FROM side.runs WHERE run_id NOT IN (SELECT run_id FROM runs)"
                ).fetchall()]
                for table in RUN_TABLES:
                    # By name: a side file of an older schema lacks the newer columns.
                    side.execute(f"INSERT INTO {table} BY NAME SELECT * FROM side.{table} "
                                 "WHERE run_id IN (SELECT UNNEST(?::VARCHAR[]))", [ids])
        finally:
            self.con.execute("DETACH side")
        return [str(i) for i in ids]

    def runs(self, scenario: str | None = None) -> pd.DataFrame:
        sql = "SELECT * FROM runs"
        params: list[object] = []
        if scenario is not None:
            sql += " WHERE scenario = ?"
            params.append(scenario)
        return self.con.execute(sql + " ORDER BY created_utc", params).df()

    def run_summaries(self, scenario: str | None = None) -> pd.DataFrame:
        """Stored runs, newest first, with their headline metrics beside them.

        Columns: ``run_id, name, created_utc, scenario, policy, status, knobs, settings``
        (JSON text) then :data:`RUN_SUMMARY_METRICS` (NaN where a run lacks one) and
        ``currency``.
        """
        runs = self.runs(scenario)
        if "name" not in runs:
            runs["name"] = None
        metrics = self.con.execute(
            "SELECT run_id, metric, value, text FROM run_metrics WHERE metric IN ("
            + ", ".join("?" for _ in (*RUN_SUMMARY_METRICS, "currency")) + ")",
            [*RUN_SUMMARY_METRICS, "currency"]).df()
        wide = metrics[metrics["metric"] != "currency"].pivot_table(
            index="run_id", columns="metric", values="value", aggfunc="first")
        wide = wide.reindex(columns=list(RUN_SUMMARY_METRICS))
        cur = metrics[metrics["metric"] == "currency"].set_index("run_id")["text"]
        out = runs.join(wide, on="run_id")
        out["currency"] = out["run_id"].map(
            lambda r: json.loads(cur[r]) if r in cur.index and cur[r] else "")
        cols = ["run_id", "name", "created_utc", "scenario", "policy", "status", "knobs",
                "settings", *RUN_SUMMARY_METRICS, "currency"]
        return out.reindex(columns=cols).sort_values(
            "created_utc", ascending=False).reset_index(drop=True)

    def run_ids(self, prefix: str) -> list[str]:
        """Ids of the stored runs whose id or name starts with ``prefix``."""
        rows = self.con.execute(
            "SELECT run_id FROM runs WHERE starts_with(run_id, ?) OR name = ? "
            "ORDER BY created_utc", [prefix, prefix]).fetchall()
        return [r[0] for r in rows]

    def resolve_run(self, ref: str) -> str:
        """The one run whose id starts with ``ref`` (or whose name is ``ref``); the newest
        run for ``ref == "latest"``. Raises :class:`StoreError` saying what is stored."""
        if ref == "latest":
            row = self.con.execute(
                "SELECT run_id FROM runs ORDER BY created_utc DESC LIMIT 1").fetchone()
            if row is None:
                raise StoreError(f"no runs in {self.path}; make one with `workbench plan`")
            return str(row[0])
        ids = self.run_ids(ref)
        if len(ids) == 1:
            return ids[0]
        if not ids:
            raise StoreError(f"no run {ref!r} in {self.path}; `workbench runs list` shows "
                             "the stored runs")
        raise StoreError(f"{ref!r} names {len(ids)} runs ({', '.join(ids[:5])}); give more "
                         "of the id")

    def run_info(self, run_id: str) -> dict[str, Any]:
        """One row of ``runs`` as a dict, ``knobs`` and ``settings`` parsed."""
        frame = self.con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]).df()
        if frame.empty:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        rec = {k: (None if is_null(v) else py(v)) for k, v in frame.iloc[0].items()}
        for key in ("knobs", "settings", "bound"):
            try:
                rec[key] = json.loads(str(rec.get(key) or "{}"))
            except ValueError:
                rec[key] = {}
        return rec

    def run_name_problem(self, run_id: str, name: str) -> str | None:
        """Why ``name`` cannot name run ``run_id`` (:meth:`resolve_run` would then find
        another run, or two), or None: ``latest`` is reserved; a name of hex digits could
        be taken for a run id or its prefix; another run has that name already."""
        name = name.strip()
        if not name:
            return None
        if len(name) > RUN_NAME_CHARS or not name.isprintable():
            return (f"run name {name[:40]!r}{'…' if len(name) > 40 else ''} "
                    f"({len(name):,} characters) must be at most {RUN_NAME_CHARS} printable "
                    "characters on one line (it heads the columns of `runs compare`); "
                    "choose a shorter name")
        if name.lower() in RESERVED_RUN_REFS:
            return (f"run name {name!r} is reserved ('latest' means the newest run); choose "
                    "another name")
        if re.fullmatch(r"[0-9a-fA-F]{1,32}", name):
            return (f"run name {name!r} could be taken for a run id (ids are hex digits, and "
                    "a prefix of one picks a run); add a letter beyond a-f or a space, e.g. "
                    f"'{name} run'")
        other = self.con.execute("SELECT run_id FROM runs WHERE name = ? AND run_id <> ?",
                                 [name, run_id]).fetchone()
        if other is not None:
            return (f"run {other[0]} is already named {name!r}; choose another name, or "
                    f"rename that one first")
        return None

    def rename_run(self, run_id: str, name: str) -> None:
        """Give a stored run a name (empty: none); a name :meth:`run_name_problem` refuses
        raises :class:`StoreError`."""
        problem = self.run_name_problem(run_id, name)
        if problem:
            raise StoreError(problem)
        with self.transaction() as con:
            con.execute("UPDATE runs SET name = ? WHERE run_id = ?",
                        [name.strip() or None, run_id])

    def delete_run(self, run_id: str) -> None:
        """Remove a run and everything stored with it, in one transaction."""
        with self.transaction() as con:
            for table in (*RUN_TABLES[1:], RUN_TABLES[0]):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

    def run_plan(self, run_id: str) -> pd.DataFrame:
        return self.con.execute(
            "SELECT * EXCLUDE (run_id) FROM plan_rows WHERE run_id = ? "
            "ORDER BY slot_start, job_id", [run_id]).df()

    def run_migrations(self, run_id: str) -> pd.DataFrame:
        return self.con.execute(
            "SELECT * EXCLUDE (run_id) FROM migrations WHERE run_id = ? "
            "ORDER BY slot_start, job_id", [run_id]).df()

    def run_slots(self, run_id: str) -> pd.DataFrame:
        """The run's per-slot records, as :attr:`workbench.sim.RunResult.slots` had them."""
        rows = self.con.execute(
            "SELECT record FROM slot_rows WHERE run_id = ? ORDER BY slot", [run_id]).fetchall()
        if not rows:
            return pd.DataFrame()
        frame = pd.DataFrame([json.loads(r[0]) for r in rows])
        if "time" in frame:
            frame["time"] = pd.to_datetime(frame["time"], utc=True)
        return frame

    def run_metrics(self, run_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for metric, value, text in self.con.execute(
            "SELECT metric, value, text FROM run_metrics WHERE run_id = ?", [run_id]
        ).fetchall():
            out[metric] = value if text is None else json.loads(text)
        return out


def run_frames(meta: dict[str, Any], plan: pd.DataFrame, migrations: pd.DataFrame,
               slots: pd.DataFrame, metrics: dict[str, Any]) -> RunFrames:
    """One run as the rows of :data:`RUN_TABLES`, in that order (columns by name)."""
    run_id = str(meta.get("run_id") or uuid.uuid4().hex[:12])
    settings = {k: meta[k] for k in RUN_SETTINGS if k in meta}
    run = pd.DataFrame([{
        "run_id": run_id, "scenario": meta["scenario"], "policy": meta["policy"],
        "created_utc": now_utc(), "knobs": json.dumps(meta.get("knobs", {}), default=str),
        "status": meta.get("status", "ok"), "log": meta.get("log", ""),
        "name": meta.get("name") or None, "settings": json.dumps(settings, default=str),
        "baseline_run_id": meta.get("baseline_run_id") or None,
        "bound": json.dumps(dict(meta["bound"]), default=str) if meta.get("bound") else None,
    }])
    # reindex builds a new frame of the stored columns only (no second copy): DuckDB then
    # reads it column by column (insert_frame registers the frame).
    plan_df = plan.reindex(columns=[c for c in PLAN_ROWS.names if c != "run_id"])
    for col in ("slot_start", "slot_end"):
        plan_df[col] = pd.to_datetime(plan_df[col], utc=True).dt.tz_localize(None)
    plan_df.insert(0, "run_id", run_id)
    mig_df = migrations.reindex(columns=[c for c in MIGRATIONS.names if c != "run_id"])
    mig_df["slot_start"] = pd.to_datetime(mig_df["slot_start"], utc=True).dt.tz_localize(None)
    mig_df.insert(0, "run_id", run_id)
    slot_df = pd.DataFrame({
        "run_id": run_id,
        "slot": np.arange(len(slots), dtype=np.int64) if "slot" not in slots else slots["slot"],
        "record": slots.to_json(orient="records", lines=True, date_format="iso").splitlines()
        if len(slots) else [],
    })
    metric_rows = []
    for key, value in metrics.items():
        if isinstance(value, bool | int | float | np.integer | np.floating):
            metric_rows.append({"run_id": run_id, "metric": key, "value": float(value),
                                "text": None})
        else:
            metric_rows.append({"run_id": run_id, "metric": key, "value": None,
                                "text": json.dumps(value, default=str)})
    return run, plan_df, mig_df, slot_df, pd.DataFrame(metric_rows)
