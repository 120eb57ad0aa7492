"""The DuckDB store: one file holding scenarios, grid series, profiles, runs and plans.

The schema is versioned in a ``schema_version`` table. Opening a file written by a newer
workbench (or by something else) raises :class:`StoreError`; an older version is migrated in
one transaction. Every write runs in a transaction, so a failed write leaves the file as it
was.

Tables (all keyed by ``scenario`` where they belong to one):

- ``scenarios``: name, start_utc, slot_s, n_slots, currency, description
- ``datacenters``: scenario, name, region, grid_zone, timezone, pue, idle_power_kw
- ``gpu_pools``: scenario, datacenter, gpu_type, count, idle_power_w, max_power_w, gpus_per_node
- ``links``: scenario, src, dst, bandwidth_gbps, latency_ms, transfer_energy_kwh_per_gb
- ``grid_series``: time_utc, region, price_per_kwh, currency, carbon_g_per_kwh, source
  (long format; one row per region and UTC timestamp)
- ``jobs``: scenario, job_id, kind, app, arrival_utc, home, ... (one row per job)
- ``profiles``: app, gpu_type, params (JSON), derived, source
- ``gpu_profile_runs`` / ``gpu_profile_samples``: NVML profiler summaries and samples
- ``devices``: operator-added accelerator specs (JSON); ``compute_measurements``: timed
  training steps (app, device, GPUs, local batch, step and sync time)
- ``runs``, ``plan_rows``, ``migrations``, ``slot_rows``, ``run_metrics``: simulator output
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from workbench.model import Datacenter, GpuPool, Job, Link, Scenario, as_utc

log = logging.getLogger(__name__)

SCHEMA_VERSION = 6
"""Version 1: scenarios, sites, pools, links, grid, jobs, profiles, runs.
Version 2: adds the NVML profiler tables and the ``derived`` flag on profiles.
Version 3: jobs' dataset sizes, scenarios' price kind, plan rows' data moved and time lost,
every data movement in ``migrations``.
Version 4: adds ``devices`` (operator-added device specs) and ``compute_measurements``
(timed training steps, :mod:`workbench.compute.measure`).
Version 5: runs gain a ``name`` (set by the operator) and ``settings`` (the simulator's
forecast, noise, seed, restart and slot settings as JSON).
Version 6: plan rows keep their ``movement_kwh`` (transfer and restart energy, what the
attribution of a saving needs); runs keep the ``baseline_run_id`` their saving is measured
against and their hindsight ``bound`` (JSON). Rows stored before have NULL there."""


RESERVED_RUN_REFS: tuple[str, ...] = ("latest",)
"""Words :meth:`Store.resolve_run` reads as something other than a name or an id."""


class StoreError(RuntimeError):
    """The store cannot be opened or written; the message says why and what to do."""


class StoreLockedError(StoreError):
    """Another process holds the store's write lock (a running command or the app)."""


_SCHEMA_V1 = [
    """CREATE TABLE scenarios (
        name VARCHAR PRIMARY KEY, start_utc TIMESTAMP NOT NULL, slot_s INTEGER NOT NULL,
        n_slots INTEGER NOT NULL, currency VARCHAR NOT NULL, description VARCHAR)""",
    """CREATE TABLE datacenters (
        scenario VARCHAR NOT NULL, name VARCHAR NOT NULL, region VARCHAR NOT NULL,
        grid_zone VARCHAR, timezone VARCHAR NOT NULL, pue DOUBLE NOT NULL,
        idle_power_kw DOUBLE NOT NULL, PRIMARY KEY (scenario, name))""",
    """CREATE TABLE gpu_pools (
        scenario VARCHAR NOT NULL, datacenter VARCHAR NOT NULL, gpu_type VARCHAR NOT NULL,
        count INTEGER NOT NULL, idle_power_w DOUBLE NOT NULL, max_power_w DOUBLE NOT NULL,
        gpus_per_node INTEGER NOT NULL, PRIMARY KEY (scenario, datacenter, gpu_type))""",
    """CREATE TABLE links (
        scenario VARCHAR NOT NULL, src VARCHAR NOT NULL, dst VARCHAR NOT NULL,
        bandwidth_gbps DOUBLE NOT NULL, latency_ms DOUBLE NOT NULL,
        transfer_energy_kwh_per_gb DOUBLE NOT NULL, PRIMARY KEY (scenario, src, dst))""",
    """CREATE TABLE grid_series (
        time_utc TIMESTAMP NOT NULL, region VARCHAR NOT NULL, price_per_kwh DOUBLE,
        currency VARCHAR, carbon_g_per_kwh DOUBLE, source VARCHAR,
        PRIMARY KEY (region, time_utc))""",
    """CREATE TABLE jobs (
        scenario VARCHAR NOT NULL, job_id VARCHAR NOT NULL, kind VARCHAR NOT NULL,
        app VARCHAR NOT NULL, arrival_utc TIMESTAMP NOT NULL, home VARCHAR NOT NULL,
        requested_gpus INTEGER NOT NULL, gpu_counts VARCHAR NOT NULL, batch_size INTEGER NOT NULL,
        work_samples DOUBLE NOT NULL, deadline_utc TIMESTAMP, checkpoint_gb DOUBLE NOT NULL,
        gpu_types VARCHAR NOT NULL, end_utc TIMESTAMP, max_latency_ms DOUBLE,
        load_fraction DOUBLE NOT NULL, PRIMARY KEY (scenario, job_id))""",
    """CREATE TABLE profiles (
        app VARCHAR NOT NULL, gpu_type VARCHAR NOT NULL, params VARCHAR NOT NULL,
        source VARCHAR, PRIMARY KEY (app, gpu_type))""",
    """CREATE TABLE runs (
        run_id VARCHAR PRIMARY KEY, scenario VARCHAR NOT NULL, policy VARCHAR NOT NULL,
        created_utc TIMESTAMP NOT NULL, knobs VARCHAR NOT NULL, status VARCHAR NOT NULL,
        log VARCHAR)""",
    """CREATE TABLE plan_rows (
        run_id VARCHAR NOT NULL, slot_start TIMESTAMP NOT NULL, slot_end TIMESTAMP NOT NULL,
        job_id VARCHAR NOT NULL, region VARCHAR, gpu_type VARCHAR, n_gpus INTEGER,
        batch_size INTEGER, action VARCHAR NOT NULL, energy_kwh DOUBLE, cost DOUBLE,
        carbon_kg DOUBLE, price_per_kwh DOUBLE, carbon_g_per_kwh DOUBLE, progress DOUBLE)""",
    """CREATE TABLE migrations (
        run_id VARCHAR NOT NULL, slot_start TIMESTAMP NOT NULL, job_id VARCHAR NOT NULL,
        from_region VARCHAR NOT NULL, to_region VARCHAR NOT NULL, checkpoint_gb DOUBLE,
        transfer_s DOUBLE, expected_gain DOUBLE, reason VARCHAR)""",
    """CREATE TABLE slot_rows (run_id VARCHAR NOT NULL, slot INTEGER NOT NULL,
        record VARCHAR NOT NULL)""",
    """CREATE TABLE run_metrics (run_id VARCHAR NOT NULL, metric VARCHAR NOT NULL,
        value DOUBLE, text VARCHAR, PRIMARY KEY (run_id, metric))""",
]

_MIGRATIONS: dict[int, list[str]] = {
    # 2 -> 3: jobs carry their dataset size; plan rows their data moved and time lost;
    # migrations every data movement (dataset and/or checkpoint).
    3: [
        "ALTER TABLE scenarios ADD COLUMN price_kind VARCHAR",
        "ALTER TABLE jobs ADD COLUMN dataset_gb DOUBLE DEFAULT 0.0",
        "ALTER TABLE plan_rows ADD COLUMN transfer_gb DOUBLE DEFAULT 0.0",
        "ALTER TABLE plan_rows ADD COLUMN lost_s DOUBLE DEFAULT 0.0",
        "ALTER TABLE migrations ADD COLUMN dataset_gb DOUBLE DEFAULT 0.0",
        "ALTER TABLE migrations ADD COLUMN transfer_gb DOUBLE",
        "ALTER TABLE migrations ADD COLUMN moved VARCHAR",
    ],
    # 1 -> 2: the NVML profiler tables; profiles learn whether they were derived.
    2: [
        "ALTER TABLE profiles ADD COLUMN derived BOOLEAN DEFAULT FALSE",
        """CREATE TABLE gpu_profile_runs (
            profile_id VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, started_utc TIMESTAMP,
            duration_s DOUBLE, mean_power_w DOUBLE, energy_j DOUBLE, n_gpus INTEGER,
            command VARCHAR)""",
        """CREATE TABLE gpu_profile_samples (
            profile_id VARCHAR NOT NULL, t_s DOUBLE NOT NULL, gpu_index INTEGER NOT NULL,
            power_w DOUBLE, energy_j DOUBLE, util_pct DOUBLE, mem_used_mb DOUBLE,
            sm_clock_mhz DOUBLE)""",
    ],
    # 3 -> 4: the compute predictor's device table and step-time measurements.
    4: [
        "CREATE TABLE devices (name VARCHAR PRIMARY KEY, spec VARCHAR NOT NULL)",
        """CREATE TABLE compute_measurements (
            measurement_id VARCHAR PRIMARY KEY, app VARCHAR NOT NULL, device VARCHAR NOT NULL,
            gpus INTEGER NOT NULL, nodes INTEGER NOT NULL, local_batch INTEGER NOT NULL,
            step_time_s DOUBLE NOT NULL, sync_time_s DOUBLE, steps INTEGER NOT NULL,
            measured_utc TIMESTAMP, command VARCHAR, profile_id VARCHAR)""",
    ],
    # 4 -> 5: runs are named by the operator and remember the simulator's settings.
    5: [
        "ALTER TABLE runs ADD COLUMN name VARCHAR",
        "ALTER TABLE runs ADD COLUMN settings VARCHAR",
    ],
    # 5 -> 6: what a reopened run needs for its attribution and hindsight bound.
    6: [
        "ALTER TABLE plan_rows ADD COLUMN movement_kwh DOUBLE",
        "ALTER TABLE runs ADD COLUMN baseline_run_id VARCHAR",
        "ALTER TABLE runs ADD COLUMN bound VARCHAR",
    ],
}

RUN_SETTINGS: tuple[str, ...] = (
    "forecast_mode", "forecast_error", "noise", "seed", "restart_s", "resize_s", "slot_s",
    "n_slots",
)
"""Keys of a run's ``meta`` kept in the ``settings`` column (what made the run, besides
the policy's knobs)."""

RUN_SUMMARY_METRICS: tuple[str, ...] = (
    "cost", "carbon_kg", "energy_kwh", "deadline_misses", "jobs_unfinished", "migrations",
    "mean_jct_h",
)
"""Metrics :meth:`Store.run_summaries` puts beside each run."""

# Tables whose contents scenario writes replace, with the column naming the scenario.
_SCENARIO_TABLES = ("datacenters", "gpu_pools", "links", "jobs")


GRID_ONE_THREAD_ROWS = 100_000
"""Grid writes of at least this many rows run on one DuckDB thread (a steadier peak)."""


def _constant(column: pd.Series) -> bool:
    """Whether a column holds one value (or one missing value) in every row; cheap for the
    categorical columns the grid readers give."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        return len(codes) == 0 or bool((codes == codes[0]).all())
    return column.nunique(dropna=False) <= 1


def _to_naive_utc(value: datetime | None) -> datetime | None:
    return None if value is None else as_utc(value).replace(tzinfo=None)


_DUCKDB_MAGIC = b"DUCK"
"""Bytes 8..12 of every DuckDB database file."""


def _check_store_path(path: Path) -> None:
    """Refuse, before DuckDB opens it, a path that cannot be a store: a folder, a file in a
    folder that does not exist, or a file of another kind (DuckDB would try to read an
    SQLite file through an extension it downloads)."""
    if path.is_dir():
        raise StoreError(f"store {path} is a folder; pass --db with a file name, e.g. "
                         f"{path / 'workbench.duckdb'}")
    if not path.exists():
        if not path.parent.is_dir():
            raise StoreError(f"cannot create store {path}: the folder {path.parent} does not "
                             "exist; create it or pass --db in an existing folder")
        return
    try:
        with path.open("rb") as fh:
            head = fh.read(12)
    except OSError as exc:
        raise StoreError(f"cannot read store {path}: {exc.strerror}; check its permissions"
                         ) from None
    if len(head) == 12 and head[8:12] != _DUCKDB_MAGIC:
        raise StoreError(f"{path} is not a DuckDB store (another kind of file); pass --db "
                         "with a store file, or a new name to create one")


class Store:
    """A DuckDB file holding the workbench's data.

    Parameters
    ----------
    path : str or Path
        The file (created when absent). ``":memory:"`` gives a throw-away store.
    read_only : bool
        Open without write access (several readers may share a file).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | Path = "workbench.duckdb", read_only: bool = False) -> None:
        self.path = str(path)
        if read_only and self.path != ":memory:" and not Path(self.path).exists():
            raise StoreError(f"store {self.path} does not exist; create it first")
        if self.path != ":memory:":
            _check_store_path(Path(self.path))
        try:
            self.con = duckdb.connect(self.path, read_only=read_only)
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise StoreLockedError(
                    f"store {self.path} is locked by another process (a running `workbench` "
                    "or app); close it, or pass --db with another file"
                ) from None
            raise StoreError(f"cannot open store {self.path}: {text.splitlines()[0]}; the file "
                             "is damaged or not a store: restore it from a backup, or pass "
                             "--db with another file") from None
        except duckdb.Error as exc:
            raise StoreError(
                f"{self.path} is not a DuckDB store this workbench can read: {exc}"
            ) from None
        self.read_only = read_only
        self._ensure_schema()

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Run a block atomically: on any error everything it wrote is rolled back."""
        if self.read_only:
            raise StoreError(f"store {self.path} was opened read-only")
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        else:
            self.con.execute("COMMIT")

    # -- schema ------------------------------------------------------------------------
    def schema_version(self) -> int | None:
        tables = {r[0] for r in self.con.execute("SHOW TABLES").fetchall()}
        if "schema_version" not in tables:
            return None if not tables else -1
        row = self.con.execute("SELECT max(version) FROM schema_version").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _ensure_schema(self) -> None:
        version = self.schema_version()
        if version == -1:
            raise StoreError(
                f"{self.path} holds tables but no schema_version: it was not written by the "
                "workbench; pass --db with a new file"
            )
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this workbench "
                f"understands ({SCHEMA_VERSION}); upgrade the workbench"
            )
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise StoreError(
                f"{self.path} has schema version {version}; open it writable once to migrate"
            )
        fresh = version is None
        with self.transaction() as con:
            if version is None:
                con.execute("CREATE TABLE schema_version (version INTEGER, applied_utc TIMESTAMP)")
                for ddl in _SCHEMA_V1:
                    con.execute(ddl)
                version = 1
                con.execute("INSERT INTO schema_version VALUES (1, ?)", [_now()])
            for target in range(version + 1, SCHEMA_VERSION + 1):
                # A new file passes through the migrations too; only an old one is news.
                log.log(logging.DEBUG if fresh else logging.INFO,
                        "migrating store %s to schema version %d", self.path, target)
                for ddl in _MIGRATIONS[target]:
                    con.execute(ddl)
                con.execute("INSERT INTO schema_version VALUES (?, ?)", [target, _now()])

    # -- generic -----------------------------------------------------------------------
    def table(self, name: str) -> pd.DataFrame:
        """The whole of one table as a DataFrame (for inspection and tests)."""
        return self.con.execute(f'SELECT * FROM "{name}"').df()

    def _insert(
        self, con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame, *,
        or_replace: bool = False,
    ) -> None:
        if frame.empty:
            return
        con.register("_incoming", frame)
        try:
            cols = ", ".join(f'"{c}"' for c in frame.columns)
            verb = "INSERT OR REPLACE" if or_replace else "INSERT"
            con.execute(f'{verb} INTO "{table}" ({cols}) SELECT {cols} FROM _incoming')
        finally:
            con.unregister("_incoming")

    # -- scenarios ---------------------------------------------------------------------
    def scenario_names(self) -> list[str]:
        rows = self.con.execute("SELECT name FROM scenarios ORDER BY name").fetchall()
        return [r[0] for r in rows]

    def has_scenario(self, name: str) -> bool:
        return name in self.scenario_names()

    def save_scenario(self, scenario: Scenario) -> None:
        """Write (or replace) a scenario: its sites, pools, links, jobs, profiles, grid."""
        name = scenario.name
        dcs = pd.DataFrame([{"scenario": name, **asdict(d)} for d in scenario.datacenters])
        pools = pd.DataFrame([{"scenario": name, **asdict(p)} for p in scenario.pools])
        links = pd.DataFrame(
            [{"scenario": name, **asdict(lk)} for lk in scenario.links],
            columns=["scenario", "src", "dst", "bandwidth_gbps", "latency_ms",
                     "transfer_energy_kwh_per_gb"],
        )
        jobs = pd.DataFrame([_job_row(name, j) for j in scenario.jobs])
        grid = grid_frame(scenario)
        # A scenario built from imported series must not write its resampled cube over
        # them: only regions the store has no data for over the horizon are written.
        covered = {r[0] for r in self.con.execute(
            "SELECT DISTINCT region FROM grid_series WHERE time_utc >= ? AND time_utc < ? "
            "AND source IS DISTINCT FROM ?",
            [_to_naive_utc(scenario.start), _to_naive_utc(scenario.end), _cube_source(scenario)],
        ).fetchall()}
        grid = grid[~grid["region"].isin(covered)]
        with self.transaction() as con:
            con.execute("DELETE FROM scenarios WHERE name = ?", [name])
            for table in _SCENARIO_TABLES:
                con.execute(f"DELETE FROM {table} WHERE scenario = ?", [name])
            # Whether the prices are a published tariff travels with the scenario: a short
            # cube cannot show its calendar repetition once reloaded.
            from workbench import cubes  # local: cubes imports the store's frame helpers

            con.execute(
                "INSERT INTO scenarios (name, start_utc, slot_s, n_slots, currency, "
                "description, price_kind) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [name, _to_naive_utc(scenario.start), scenario.slot_s, scenario.n_slots,
                 scenario.currency, scenario.description, cubes.price_kind(scenario.grid)],
            )
            self._insert(con, "datacenters", dcs)
            self._insert(con, "gpu_pools", pools)
            self._insert(con, "links", links)
            self._insert(con, "jobs", jobs)
            self._upsert_grid(con, grid)
            self._upsert_profiles(con, scenario.profiles)

    def load_scenario(self, name: str) -> Scenario:
        """Rebuild a scenario from the store (its cube at the scenario's slot length)."""
        from workbench import cubes  # local: cubes imports the store's frame helpers

        row = self.con.execute(
            "SELECT start_utc, slot_s, n_slots, currency, description, price_kind "
            "FROM scenarios WHERE name = ?", [name]).fetchone()
        if row is None:
            known = ", ".join(self.scenario_names()) or "none"
            raise StoreError(
                f"no scenario {name!r} in {self.path} (known: {known}); create it with "
                f"`workbench scenario generate seed3` or `workbench scenario build`"
            )
        start, slot_s, n_slots, currency, description, kind = row
        q = "SELECT * EXCLUDE (scenario) FROM {} WHERE scenario = ? ORDER BY ALL"
        dcs = [Datacenter(**r) for r in self._records(q.format("datacenters"), name)]
        pools = [GpuPool(**r) for r in self._records(q.format("gpu_pools"), name)]
        links = [Link(**r) for r in self._records(q.format("links"), name)]
        jobs = self.load_jobs(name)
        start_utc = as_utc(start)
        end_utc = start_utc + pd.Timedelta(seconds=int(slot_s) * int(n_slots))
        regions = sorted({d.region for d in dcs})
        series = self.grid_series(regions, start_utc - pd.Timedelta(days=1),
                                  end_utc + pd.Timedelta(days=1))
        cube = cubes.cube_from_series(series, slot_s=int(slot_s), start=start_utc, end=end_utc,
                                      timezones={d.region: d.timezone for d in dcs})
        history = cubes.history_cube(
            self.grid_series(regions, start_utc - pd.Timedelta(days=cubes.HISTORY_DAYS),
                             start_utc), regions, start_utc,
            timezones={d.region: d.timezone for d in dcs}, currency=str(currency))
        if kind in cubes.PRICE_KINDS:
            cube.attrs["price_kind"] = str(kind)
        apps = {j.app for j in jobs}
        profiles = [p for p in self.load_profiles() if p.app in apps]
        return Scenario(
            name=name, datacenters=tuple(dcs), pools=tuple(pools), links=tuple(links),
            jobs=tuple(jobs), profiles=tuple(profiles), grid=cube, start=start_utc,
            slot_s=int(slot_s), n_slots=int(n_slots), currency=str(currency),
            description=str(description or ""), history=history,
        )

    def scenario_fingerprint(self, name: str) -> str:
        """A fingerprint of every stored row :meth:`load_scenario` reads for ``name``: its
        scenario row, datacenters, pools, links and jobs, the whole grid series and the
        profiles (an order-free XOR of row hashes per table). A re-import that changes any
        value changes it, equal row counts or not; ``""`` when ``name`` is not stored."""
        parts = self.con.execute(
            """SELECT (SELECT bit_xor(hash(t)) FROM scenarios t WHERE name = $1),
                      (SELECT bit_xor(hash(t)) FROM datacenters t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM gpu_pools t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM links t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM jobs t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM grid_series t),
                      (SELECT bit_xor(hash(t)) FROM profiles t)""", [name]).fetchone()
        if parts is None or parts[0] is None:
            return ""
        return "-".join(format(int(p or 0), "x") for p in parts)

    # -- jobs ------------------------------------------------------------------------
    def write_jobs(self, set_name: str, jobs: Iterable[Job], replace: bool = False) -> int:
        """Insert or update jobs under a job-set (or scenario) name, in one transaction;
        ``replace`` first empties the set. Returns the number of jobs written."""
        rows = pd.DataFrame([_job_row(set_name, j) for j in jobs])
        with self.transaction() as con:
            if replace:
                con.execute("DELETE FROM jobs WHERE scenario = ?", [set_name])
            self._insert(con, "jobs", rows, or_replace=True)
        return len(rows)

    def load_jobs(self, set_name: str) -> list[Job]:
        """The jobs stored under a job-set or scenario name, by arrival."""
        return [_job_from_row(r) for r in self._records(
            "SELECT * EXCLUDE (scenario) FROM jobs WHERE scenario = ? ORDER BY arrival_utc, job_id",
            set_name)]

    def _records(self, sql: str, *params: object) -> list[dict[str, Any]]:
        frame = self.con.execute(sql, list(params)).df()
        return [
            {k: (None if _is_null(v) else _py(v)) for k, v in rec.items()}
            for rec in frame.to_dict("records")
        ]

    # -- grid series -------------------------------------------------------------------
    def write_grid_series(self, frame: pd.DataFrame) -> int:
        """Insert or update grid rows (long format); returns the number of rows written.

        ``frame`` columns: ``time_utc``, ``region`` and at least one of ``price_per_kwh``
        (with ``currency``) and ``carbon_g_per_kwh``; ``source`` optional. A row for an
        existing (region, time) updates only the values it carries, so price and carbon may
        arrive from different files.
        """
        try:
            with self._one_thread(len(frame) >= GRID_ONE_THREAD_ROWS), \
                    self.transaction() as con:
                self._upsert_grid(con, frame)
        finally:
            self.con.unregister("_grid_in")  # no-op unless a failed write left it
        return len(frame)

    @contextmanager
    def _one_thread(self, wanted: bool) -> Iterator[None]:
        """Run a block on one DuckDB thread (``wanted``), then restore the setting.

        For large grid writes: with two threads a 2 M-row import peaked at 435-559 MB over
        nine runs (the primary-key index), with one at 434-443 MB over eight, in about the
        same time on the shared two cores (docs/results.md, section 9).
        """
        if not wanted:
            yield
            return
        threads = int(self.con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        self.con.execute("SET threads = 1")
        try:
            yield
        finally:
            self.con.execute(f"SET threads = {threads}")

    def _upsert_grid(self, con: duckdb.DuckDBPyConnection, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        cols = ["time_utc", "region", "price_per_kwh", "currency", "carbon_g_per_kwh", "source"]
        missing = {"time_utc", "region"} - set(frame.columns)
        if missing:
            raise StoreError(f"grid rows lack columns {sorted(missing)}")
        text = ("region", "currency", "source")
        # One file gives one region, currency and source: pass those as constants so that
        # DuckDB scans only typed columns (a 2 M-row import would convert 6 M Python strings
        # and copy the frame several times).
        constant = all(c not in frame or _constant(frame[c]) for c in text)
        params: list[object] = []
        if constant:
            # Naive datetime64 (what every reader gives) is scanned as it is, no copy.
            col_t = frame["time_utc"]
            t = (col_t.to_numpy() if col_t.dtype.kind == "M" and getattr(col_t.dt, "tz", None)
                 is None else pd.to_datetime(col_t, utc=True).dt.tz_localize(None).to_numpy())
            times = pd.Series(t, copy=False)
            # Sorted strictly increasing times (every file reader checks that) cannot
            # repeat: only unsorted frames pay for a hash of the times.
            ordered = len(t) < 2 or bool((t[1:] > t[:-1]).all())
            dup = np.zeros(len(t), bool) if ordered else pd.Index(t).duplicated()
            params = [None if c not in frame or pd.isna(frame[c].iloc[0]) else
                      str(frame[c].iloc[0]) for c in text]
            data = pd.DataFrame({"time_utc": t}, copy=False)
            values = []
            for col in ("price_per_kwh", "carbon_g_per_kwh"):
                if col in frame:
                    data[col] = frame[col].to_numpy(dtype="float64", copy=False)
                    values.append(f"CAST({col} AS DOUBLE)")
                else:
                    values.append("CAST(NULL AS DOUBLE)")
            select = (f"CAST(time_utc AS TIMESTAMP), CAST(? AS VARCHAR), {values[0]}, "
                      f"CAST(? AS VARCHAR), {values[1]}, CAST(? AS VARCHAR)")
        else:
            times = pd.to_datetime(frame["time_utc"], utc=True).dt.tz_localize(None)
            data = frame.reindex(columns=cols).copy()
            data["time_utc"] = times
            dup = data.duplicated(["region", "time_utc"]).to_numpy()
            for col in ("price_per_kwh", "carbon_g_per_kwh"):
                data[col] = data[col].astype("float64")
            for col in text:
                data[col] = data[col].astype(object).where(data[col].notna(), None)
            select = ("CAST(time_utc AS TIMESTAMP), CAST(region AS VARCHAR), "
                      "CAST(price_per_kwh AS DOUBLE), CAST(currency AS VARCHAR), "
                      "CAST(carbon_g_per_kwh AS DOUBLE), CAST(source AS VARCHAR)")
        if dup.any():
            i = int(np.flatnonzero(dup)[0])
            raise StoreError(
                f"duplicate grid row for region {frame['region'].iloc[i]} at {times.iloc[i]}"
            )
        regions: list[object] = ([params[0]] if constant else
                                 list(sorted({str(r) for r in data["region"].dropna()})))
        con.register("_grid_in", data)
        try:
            self._merge_grid(con, select, params, regions, times)
        finally:
            try:
                con.unregister("_grid_in")
            except duckdb.TransactionException:
                pass  # a failed statement aborted the transaction: forgotten after ROLLBACK

    @staticmethod
    def _merge_grid(con: duckdb.DuckDBPyConnection, select: str, params: list[object],
                    regions: list[object], times: pd.Series) -> None:
        """Upsert the registered ``_grid_in`` (``select`` types its columns).

        A file whose rows meet no stored (region, time) -- the usual first import -- is a
        plain ``INSERT``. Otherwise the stored rows it meets are updated in place and only
        the new ones inserted: ``INSERT ... ON CONFLICT DO UPDATE`` gives the same rows but
        takes about 1.6x the memory of a plain insert into the primary-key index (2 M rows on
        a bare table with the same key: +420 MB against +260 MB; docs/results.md, section 9).
        """
        staged = (f"(SELECT {select} FROM _grid_in) AS i(time_utc, region, price_per_kwh, "
                  "currency, carbon_g_per_kwh, source)")
        first, last = times.min(), times.max()
        met = 1
        if regions and not (pd.isna(first) or pd.isna(last)):
            met = int(con.execute(
                f"SELECT count(*) FROM grid_series WHERE region IN "
                f"({', '.join('?' * len(regions))}) AND time_utc BETWEEN ? AND ?",
                [*regions, first.to_pydatetime(), last.to_pydatetime()]).fetchall()[0][0])
        if met:
            con.execute(
                f"""UPDATE grid_series AS g SET
                      price_per_kwh = coalesce(i.price_per_kwh, g.price_per_kwh),
                      currency = coalesce(i.currency, g.currency),
                      carbon_g_per_kwh = coalesce(i.carbon_g_per_kwh, g.carbon_g_per_kwh),
                      source = coalesce(i.source, g.source)
                    FROM {staged}
                    WHERE g.region = i.region AND g.time_utc = i.time_utc""", params)
            con.execute(
                f"""INSERT INTO grid_series SELECT i.* FROM {staged}
                    WHERE NOT EXISTS (SELECT 1 FROM grid_series AS g
                                      WHERE g.region = i.region AND g.time_utc = i.time_utc)""",
                params)
        else:
            con.execute(f"INSERT INTO grid_series SELECT i.* FROM {staged}", params)

    def grid_series(
        self,
        regions: Iterable[str] | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> pd.DataFrame:
        """Grid rows (long format, UTC), optionally limited to regions and ``[start, end)``."""
        sql = "SELECT * FROM grid_series WHERE 1=1"
        params: list[object] = []
        if regions is not None:
            regions = list(regions)
            sql += f" AND region IN ({', '.join('?' for _ in regions)})"
            params += regions
        if start is not None:
            sql += " AND time_utc >= ?"
            params.append(_to_naive_utc(start))
        if end is not None:
            sql += " AND time_utc < ?"
            params.append(_to_naive_utc(end))
        return self.con.execute(sql + " ORDER BY region, time_utc", params).df()

    def grid_regions(self) -> list[str]:
        return [r[0] for r in self.con.execute(
            "SELECT DISTINCT region FROM grid_series ORDER BY region").fetchall()]

    # -- profiles ----------------------------------------------------------------------
    def save_profiles(self, profiles: Iterable[Any]) -> int:
        """Insert or replace performance profiles (:class:`workbench.perf.JobProfile`)."""
        with self.transaction() as con:
            return self._upsert_profiles(con, profiles)

    def _upsert_profiles(self, con: duckdb.DuckDBPyConnection, profiles: Iterable[Any]) -> int:
        rows = [
            {"app": p.app, "gpu_type": p.gpu_type,
             "params": json.dumps({"throughput": asdict(p.throughput),
                                   "efficiency": asdict(p.efficiency),
                                   "energy": asdict(p.energy),
                                   "step_time_interval": getattr(p, "step_time_interval",
                                                                 None)}),
             "source": p.source, "derived": bool(p.derived)}
            for p in profiles
        ]
        if not rows:
            return 0
        frame = pd.DataFrame(rows)
        con.register("_prof_in", frame)
        try:
            con.execute(
                "INSERT OR REPLACE INTO profiles (app, gpu_type, params, source, derived) "
                "SELECT app, gpu_type, params, source, derived FROM _prof_in"
            )
        finally:
            con.unregister("_prof_in")
        return len(rows)

    def load_profiles(self) -> list[Any]:
        """Every stored profile as :class:`workbench.perf.JobProfile`."""
        from workbench.perf import EfficiencyParams, EnergyParams, JobProfile, ThroughputParams

        out = []
        for app, gpu, params, source, derived in self.con.execute(
            "SELECT app, gpu_type, params, source, derived FROM profiles ORDER BY app, gpu_type"
        ).fetchall():
            d = json.loads(params)
            eff = dict(d["efficiency"])
            eff["phi_progress"] = tuple(eff["phi_progress"])
            eff["phi_values"] = tuple(eff["phi_values"])
            out.append(JobProfile(
                app=app, gpu_type=gpu, throughput=ThroughputParams(**d["throughput"]),
                efficiency=EfficiencyParams(**eff), energy=EnergyParams(**d["energy"]),
                derived=bool(derived), source=source or "",
                step_time_interval=(None if d.get("step_time_interval") is None
                                    else tuple(d["step_time_interval"])),
            ))
        return out

    def save_gpu_profile(self, summary: dict[str, Any], samples: pd.DataFrame) -> str:
        """Store one NVML profiling session (summary row and its samples); returns its id."""
        profile_id = uuid.uuid4().hex[:12]
        row = pd.DataFrame([{
            "profile_id": profile_id, "name": summary["name"],
            "started_utc": _to_naive_utc(summary.get("started_utc")),
            "duration_s": summary.get("duration_s"), "mean_power_w": summary.get("mean_power_w"),
            "energy_j": summary.get("energy_j"), "n_gpus": summary.get("n_gpus"),
            "command": summary.get("command"),
        }])
        frame = samples.copy()
        frame.insert(0, "profile_id", profile_id)
        with self.transaction() as con:
            self._insert(con, "gpu_profile_runs", row)
            self._insert(con, "gpu_profile_samples", frame)
        return profile_id

    # -- runs --------------------------------------------------------------------------
    def save_run(
        self,
        meta: dict[str, Any],
        plan: pd.DataFrame,
        migrations: pd.DataFrame,
        slots: pd.DataFrame,
        metrics: dict[str, Any],
    ) -> str:
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
        frames = [self._run_frames(*run) for run in runs]
        with self.transaction() as con:
            for run_df, plan_df, mig_df, slot_df, metric_df in frames:
                self._insert(con, "runs", run_df)
                self._insert(con, "plan_rows", plan_df)
                self._insert(con, "migrations", mig_df)
                self._insert(con, "slot_rows", slot_df)
                self._insert(con, "run_metrics", metric_df)
        return [str(f[0]["run_id"].iloc[0]) for f in frames]

    def copy_runs_from(self, path: str | Path) -> list[str]:
        """Copy every run of another store file (e.g. a side file written while this store
        was locked) into this one in one transaction; runs already here are skipped.
        Returns the ids copied."""
        other = str(Path(path).resolve()).replace("'", "''")
        tables = ("runs", "plan_rows", "migrations", "slot_rows", "run_metrics")
        with self.transaction() as con:
            con.execute(f"ATTACH '{other}' AS side (READ_ONLY)")
            try:
                ids = [r[0] for r in con.execute(
                    "SELECT run_id FROM side.runs WHERE run_id NOT IN (SELECT run_id FROM runs)"
                ).fetchall()]
                for table in tables:
                    # By name: a side file of an older schema lacks the newer columns.
                    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM side.{table} WHERE "
                                "run_id IN (SELECT UNNEST(?::VARCHAR[]))", [ids])
            finally:
                con.execute("DETACH side")
        return [str(i) for i in ids]

    def _run_frames(
        self, meta: dict[str, Any], plan: pd.DataFrame, migrations: pd.DataFrame,
        slots: pd.DataFrame, metrics: dict[str, Any],
    ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        run_id = str(meta.get("run_id") or uuid.uuid4().hex[:12])
        settings = {k: meta[k] for k in RUN_SETTINGS if k in meta}
        run = pd.DataFrame([{
            "run_id": run_id, "scenario": meta["scenario"], "policy": meta["policy"],
            "created_utc": _now(), "knobs": json.dumps(meta.get("knobs", {}), default=str),
            "status": meta.get("status", "ok"), "log": meta.get("log", ""),
            "name": meta.get("name") or None, "settings": json.dumps(settings, default=str),
            "baseline_run_id": meta.get("baseline_run_id") or None,
            "bound": json.dumps(dict(meta["bound"]), default=str) if meta.get("bound")
            else None,
        }])
        plan_cols = ["slot_start", "slot_end", "job_id", "region", "gpu_type", "n_gpus",
                     "batch_size", "action", "energy_kwh", "cost", "carbon_kg", "price_per_kwh",
                     "carbon_g_per_kwh", "progress", "transfer_gb", "lost_s", "movement_kwh"]
        # reindex builds a new frame of the stored columns only (no second copy): DuckDB
        # then reads it column by column (Store._insert registers the frame).
        plan_df = plan.reindex(columns=plan_cols)
        for col in ("slot_start", "slot_end"):
            plan_df[col] = pd.to_datetime(plan_df[col], utc=True).dt.tz_localize(None)
        plan_df.insert(0, "run_id", run_id)
        mig_cols = ["slot_start", "job_id", "from_region", "to_region", "checkpoint_gb",
                    "transfer_s", "expected_gain", "reason", "dataset_gb", "transfer_gb",
                    "moved"]
        mig_df = migrations.reindex(columns=mig_cols)
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
        rec = {k: (None if _is_null(v) else _py(v)) for k, v in frame.iloc[0].items()}
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
            for table in ("plan_rows", "migrations", "slot_rows", "run_metrics", "runs"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

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

    def series_summary(self) -> pd.DataFrame:
        """Imported grid series: region, kind (price or carbon), unit, span and rows."""
        return self.con.execute(
            """SELECT region, 'price' AS kind, coalesce(any_value(currency), '?') || '/kWh'
                      AS unit, min(time_utc) AS first_utc, max(time_utc) AS last_utc,
                      count(*) AS rows, string_agg(DISTINCT source, '; ') AS source
               FROM grid_series WHERE price_per_kwh IS NOT NULL GROUP BY region
               UNION ALL
               SELECT region, 'carbon', 'gCO2/kWh', min(time_utc), max(time_utc), count(*),
                      string_agg(DISTINCT source, '; ')
               FROM grid_series WHERE carbon_g_per_kwh IS NOT NULL GROUP BY region
               ORDER BY region, kind""").df()

    def job_sets(self) -> pd.DataFrame:
        """Stored job sets (and scenarios' jobs): name, jobs, training, inference, span."""
        return self.con.execute(
            """SELECT scenario AS name, count(*) AS jobs,
                      count(*) FILTER (WHERE kind = 'training') AS training,
                      count(*) FILTER (WHERE kind = 'inference') AS inference,
                      min(arrival_utc) AS first_arrival_utc, max(arrival_utc) AS
                      last_arrival_utc,
                      scenario IN (SELECT name FROM scenarios) AS is_scenario
               FROM jobs GROUP BY scenario ORDER BY scenario""").df()

    def profile_summary(self) -> pd.DataFrame:
        """Stored performance profiles: app, GPU type, derived flag and source."""
        return self.con.execute(
            "SELECT app, gpu_type, derived, source FROM profiles ORDER BY app, gpu_type").df()

    def run_plan(self, run_id: str) -> pd.DataFrame:
        return self.con.execute(
            "SELECT * EXCLUDE (run_id) FROM plan_rows WHERE run_id = ? "
            "ORDER BY slot_start, job_id", [run_id]).df()

    def run_metrics(self, run_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for metric, value, text in self.con.execute(
            "SELECT metric, value, text FROM run_metrics WHERE run_id = ?", [run_id]
        ).fetchall():
            out[metric] = value if text is None else json.loads(text)
        return out


def grid_frame(scenario: Scenario) -> pd.DataFrame:
    """The scenario's cube in the store's long grid format."""
    cube = scenario.grid
    frame = cube[["price_per_kwh", "carbon_g_per_kwh"]].to_dataframe().reset_index()
    frame = frame.rename(columns={"time": "time_utc"})
    frame["currency"] = cube["price_per_kwh"].attrs.get("currency", scenario.currency)
    frame["source"] = _cube_source(scenario)
    return frame


def _cube_source(scenario: Scenario) -> str:
    """The ``source`` of grid rows that a scenario wrote itself (not imported)."""
    return f"scenario {scenario.name}"


def _job_row(scenario: str, job: Job) -> dict[str, Any]:
    return {
        "scenario": scenario, "job_id": job.job_id, "kind": job.kind, "app": job.app,
        "arrival_utc": _to_naive_utc(job.arrival), "home": job.home,
        "requested_gpus": job.requested_gpus, "gpu_counts": json.dumps(list(job.gpu_counts)),
        "batch_size": job.batch_size, "work_samples": job.work_samples,
        "deadline_utc": _to_naive_utc(job.deadline), "checkpoint_gb": job.checkpoint_gb,
        "gpu_types": json.dumps(list(job.gpu_types)), "end_utc": _to_naive_utc(job.end),
        "max_latency_ms": job.max_latency_ms, "load_fraction": job.load_fraction,
        "dataset_gb": job.dataset_gb,
    }


def _job_from_row(r: dict[str, Any]) -> Job:
    return Job(
        job_id=r["job_id"], kind=r["kind"], app=r["app"], arrival=as_utc(r["arrival_utc"]),
        home=r["home"], requested_gpus=int(r["requested_gpus"]),
        gpu_counts=tuple(json.loads(r["gpu_counts"])), batch_size=int(r["batch_size"]),
        work_samples=float(r["work_samples"]),
        deadline=None if r["deadline_utc"] is None else as_utc(r["deadline_utc"]),
        checkpoint_gb=float(r["checkpoint_gb"]), gpu_types=tuple(json.loads(r["gpu_types"])),
        end=None if r["end_utc"] is None else as_utc(r["end_utc"]),
        max_latency_ms=r["max_latency_ms"], load_fraction=float(r["load_fraction"]),
        dataset_gb=float(r.get("dataset_gb") or 0.0),
    )


def _is_null(v: object) -> bool:
    return v is None or v is pd.NaT or (isinstance(v, float) and np.isnan(v))


def _py(v: object) -> object:
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
