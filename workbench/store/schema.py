"""The store's tables, their schema versions and the migrations between them.

Each table is a tuple of :class:`workbench.schema.Field` s: the stored fields of the shared
records (:data:`~workbench.schema.PLAN_ROW`, :data:`~workbench.schema.MIGRATION`,
:data:`~workbench.schema.JOB`, :data:`~workbench.schema.GRID_ROW`) and the store's own.
A field's ``since`` is the schema version that added it, a table's ``since`` the version
that created it; version ``N``'s migration creates the tables of version ``N`` and adds the
columns of version ``N`` (with their defaults) to the older tables. A new file is made at
version 1 and migrated as an old one is, so that both hold the same tables with the same
columns in the same order.

A read-only store of an older version cannot be migrated: :func:`ensure_schema` lays
temporary views over it that give the later columns their defaults (or NULL) and
temporary empty tables for the later tables, so that every reader sees the current schema.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from workbench.schema import GRID_ROW, JOB, MIGRATION, PLAN_ROW, Field
from workbench.store.errors import StoreError

log = logging.getLogger("workbench.store")

SCHEMA_VERSION = 8
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
against and their hindsight ``bound`` (JSON). Rows stored before have NULL there.
Version 7: on-site supply (:mod:`workbench.supply`): ``energy_series`` (generation,
irradiance and wind speed series a site's renewables read), ``supply`` (each scenario's
sources with their output, batteries and demand charges); plan rows keep the GPU power limit
they ran under, the split of their energy between renewables, battery and grid, and the
energy the power limit saved. Rows stored before have NULL there.
Version 8: no new table; a profile's throughput parameters are stored under Pollux's names
for the sync terms (``alpha_n``, ``beta_n`` inter-node), marked ``"sync_names": "pollux"``
(one stored before has no mark and is read swapped, :mod:`workbench.store.profiles`): a
workbench of version 7 would read the new ones swapped, so it refuses the file."""

_SQL_TYPES = {"text": "VARCHAR", "json": "VARCHAR", "time": "TIMESTAMP", "int": "INTEGER",
              "float": "DOUBLE", "bool": "BOOLEAN"}


@dataclass(frozen=True)
class Table:
    """One table: its fields (each with the version that added it), primary key and the
    version that created it."""

    name: str
    fields: tuple[Field, ...]
    key: tuple[str, ...] = ()
    since: int = 1

    def columns(self, version: int = SCHEMA_VERSION) -> tuple[Field, ...]:
        """The columns at ``version``, in the file's order (by the version that added
        them, then as declared)."""
        order = {f.name: i for i, f in enumerate(self.fields)}
        held = [f for f in self.fields if f.since is not None and f.since <= version]
        return tuple(sorted(held, key=lambda f: (f.since or 0, order[f.name])))

    @property
    def names(self) -> tuple[str, ...]:
        """Column names of the current schema, in the file's order."""
        return tuple(f.name for f in self.columns())

    def create_sql(self, version: int | None = None) -> str:
        """``CREATE TABLE`` of the table as of ``version`` (default: when it was made)."""
        cols = [_column_sql(f) for f in self.columns(self.since if version is None
                                                       else version)]
        if self.key:
            cols.append(f"PRIMARY KEY ({', '.join(self.key)})")
        return f"CREATE TABLE {self.name} ({', '.join(cols)})"


def _column_sql(f: Field) -> str:
    sql = f"{f.name} {_SQL_TYPES[f.dtype]}"
    if f.required:
        sql += " NOT NULL"
    if f.default is not None:
        sql += f" DEFAULT {_literal(f.default)}"
    return sql


def _literal(value: float | bool) -> str:
    return ("TRUE" if value else "FALSE") if isinstance(value, bool) else repr(float(value))


def _col(name: str, dtype: str, unit: str = "", *, since: int = 1, required: bool = False,
         default: float | bool | None = None) -> Field:
    return Field(name, dtype, unit, since=since, required=required, default=default)


def _texts(*names: str, since: int = 1) -> tuple[Field, ...]:
    return tuple(_col(n, "text", since=since, required=True) for n in names)


RUN_ID = _col("run_id", "text", required=True)

SCENARIOS = Table("scenarios", (
    _col("name", "text", required=True), _col("start_utc", "time", "UTC", required=True),
    _col("slot_s", "int", "s", required=True), _col("n_slots", "int", "slots", required=True),
    _col("currency", "text", required=True), _col("description", "text"),
    _col("price_kind", "text", since=3),
), key=("name",))
DATACENTERS = Table("datacenters", (
    *_texts("scenario", "name", "region"), _col("grid_zone", "text"),
    _col("timezone", "text", required=True), _col("pue", "float", required=True),
    _col("idle_power_kw", "float", "kW", required=True),
), key=("scenario", "name"))
GPU_POOLS = Table("gpu_pools", (
    *_texts("scenario", "datacenter", "gpu_type"), _col("count", "int", "GPUs", required=True),
    _col("idle_power_w", "float", "W", required=True),
    _col("max_power_w", "float", "W", required=True),
    _col("gpus_per_node", "int", "GPUs", required=True),
), key=("scenario", "datacenter", "gpu_type"))
LINKS = Table("links", (
    *_texts("scenario", "src", "dst"), _col("bandwidth_gbps", "float", "Gbit/s", required=True),
    _col("latency_ms", "float", "ms", required=True),
    _col("transfer_energy_kwh_per_gb", "float", "kWh/GB", required=True),
), key=("scenario", "src", "dst"))
GRID_SERIES = Table("grid_series", GRID_ROW.stored, key=("region", "time_utc"))
JOBS = Table("jobs", JOB.stored, key=("scenario", "job_id"))
PROFILES = Table("profiles", (
    *_texts("app", "gpu_type"), _col("params", "json", required=True), _col("source", "text"),
    _col("derived", "bool", since=2, default=False),
), key=("app", "gpu_type"))
RUNS = Table("runs", (
    RUN_ID, *_texts("scenario", "policy"), _col("created_utc", "time", "UTC", required=True),
    _col("knobs", "json", required=True), _col("status", "text", required=True),
    _col("log", "text"), _col("name", "text", since=5), _col("settings", "json", since=5),
    _col("baseline_run_id", "text", since=6), _col("bound", "json", since=6),
), key=("run_id",))
PLAN_ROWS = Table("plan_rows", (RUN_ID, *PLAN_ROW.stored))
MIGRATIONS = Table("migrations", (RUN_ID, *MIGRATION.stored))
SLOT_ROWS = Table("slot_rows", (RUN_ID, _col("slot", "int", required=True),
                                _col("record", "json", required=True)))
RUN_METRICS = Table("run_metrics", (
    RUN_ID, _col("metric", "text", required=True), _col("value", "float"),
    _col("text", "json"),
), key=("run_id", "metric"))
GPU_PROFILE_RUNS = Table("gpu_profile_runs", (
    *_texts("profile_id", "name", since=2), _col("started_utc", "time", "UTC", since=2),
    _col("duration_s", "float", "s", since=2), _col("mean_power_w", "float", "W", since=2),
    _col("energy_j", "float", "J", since=2), _col("n_gpus", "int", "GPUs", since=2),
    _col("command", "text", since=2),
), key=("profile_id",), since=2)
GPU_PROFILE_SAMPLES = Table("gpu_profile_samples", (
    *_texts("profile_id", since=2), _col("t_s", "float", "s", since=2, required=True),
    _col("gpu_index", "int", since=2, required=True),
    *(_col(n, "float", u, since=2) for n, u in (
        ("power_w", "W"), ("energy_j", "J"), ("util_pct", "%"), ("mem_used_mb", "MB"),
        ("sm_clock_mhz", "MHz"))),
), since=2)
DEVICES = Table("devices", (*_texts("name", since=4), _col("spec", "json", since=4,
                                                          required=True)),
                key=("name",), since=4)
COMPUTE_MEASUREMENTS = Table("compute_measurements", (
    *_texts("measurement_id", "app", "device", since=4),
    *(_col(n, "int", u, since=4, required=True) for n, u in (
        ("gpus", "GPUs"), ("nodes", "servers"), ("local_batch", "samples per GPU"))),
    _col("step_time_s", "float", "s", since=4, required=True),
    _col("sync_time_s", "float", "s", since=4),
    _col("steps", "int", "steps", since=4, required=True),
    _col("measured_utc", "time", "UTC", since=4), _col("command", "text", since=4),
    _col("profile_id", "text", since=4),
), key=("measurement_id",), since=4)

ENERGY_SERIES = Table("energy_series", (
    *_texts("region", "kind", since=7), _col("time_utc", "time", "UTC", since=7, required=True),
    _col("value", "float", "kW, W/m2 or m/s (by kind)", since=7, required=True),
    _col("source", "text", since=7),
), key=("region", "kind", "time_utc"), since=7)
SUPPLY = Table("supply", (
    *_texts("scenario", "name", since=7), _col("position", "int", since=7, required=True),
    *_texts("datacenter", "kind", since=7), _col("spec", "json", since=7, required=True),
    _col("output_kw", "json", "kW per slot", since=7),
), key=("scenario", "name"), since=7)

TABLES: tuple[Table, ...] = (
    SCENARIOS, DATACENTERS, GPU_POOLS, LINKS, GRID_SERIES, JOBS, PROFILES, RUNS, PLAN_ROWS,
    MIGRATIONS, SLOT_ROWS, RUN_METRICS, GPU_PROFILE_RUNS, GPU_PROFILE_SAMPLES, DEVICES,
    COMPUTE_MEASUREMENTS, ENERGY_SERIES, SUPPLY,
)
"""Every table of the current schema."""

_VERSION_TABLE = "CREATE TABLE schema_version (version INTEGER, applied_utc TIMESTAMP)"


def migration_sql(version: int) -> list[str]:
    """The statements that take a file from ``version - 1`` to ``version`` (for version 1:
    the tables a new file starts with)."""
    out = []
    for table in TABLES:
        if table.since == version:
            out.append(table.create_sql())
        elif table.since < version:
            out += [f"ALTER TABLE {table.name} ADD COLUMN {_column_sql(f)}"
                    for f in table.fields if f.since == version]
    return out


class _Executes(Protocol):
    """A DuckDB connection, or the store's :class:`~workbench.store.base.Connection`."""

    def execute(self, sql: str, parameters: object = None) -> Any: ...


def migrate(con: _Executes, version: int | None, target: int = SCHEMA_VERSION, *,
            path: str = "", fresh: bool = False) -> None:
    """Bring a file from ``version`` (None: an empty file) to ``target``, recording each
    step in ``schema_version`` (the caller holds the transaction)."""
    if version is None:
        con.execute(_VERSION_TABLE)
        version = 0
    for step in range(version + 1, target + 1):
        # A new file passes through the migrations too; only an old one is news.
        if step > 1:
            log.log(logging.DEBUG if fresh else logging.INFO,
                    "migrating store %s to schema version %d", path, step)
        for sql in migration_sql(step):
            con.execute(sql)
        con.execute("INSERT INTO schema_version VALUES (?, ?)",
                    [step, datetime.now(UTC).replace(tzinfo=None)])


def file_version(con: _Executes) -> int | None:
    """The file's schema version: None for an empty file, -1 for tables without one."""
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    if "schema_version" not in tables:
        return None if not tables else -1
    rows = con.execute("SELECT max(version) FROM schema_version").fetchall()
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def ensure_schema(con: _Executes, path: str, read_only: bool) -> None:
    """Check the file's schema version and bring it to :data:`SCHEMA_VERSION`: migrate a
    writable file in one transaction, lay views over a read-only one. Raises
    :class:`StoreError` for a file not written by the workbench or by a newer one."""
    version = file_version(con)
    if version == -1:
        raise StoreError(f"{path} holds tables but no schema_version: it was not written by "
                         "the workbench; pass --db with a new file")
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(f"{path} has schema version {version}, newer than this workbench "
                         f"understands ({SCHEMA_VERSION}); upgrade the workbench")
    if version == SCHEMA_VERSION:
        return
    if read_only:
        if version is None:
            raise StoreError(f"{path} holds no tables, so no store yet; create the store "
                             "with a command that writes (e.g. `workbench scenario generate "
                             "seed3`)")
        _read_as_current(con, version)
        return
    con.execute("BEGIN TRANSACTION")
    try:
        migrate(con, version, path=path, fresh=version is None)
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def _read_as_current(con: _Executes, version: int) -> None:
    """Temporary views and tables that show a read-only file of ``version`` with the
    current schema: later columns hold what their migration would have put there."""
    db = con.execute("SELECT current_database()").fetchall()[0][0]
    for table in TABLES:
        if table.since > version:
            con.execute(table.create_sql(SCHEMA_VERSION).replace("CREATE TABLE",
                                                                 "CREATE TEMP TABLE", 1))
            continue
        later = [f for f in table.columns() if (f.since or 0) > version]
        if not later:
            continue
        extra = ", ".join(f"CAST({'NULL' if f.default is None else _literal(f.default)} AS "
                          f"{_SQL_TYPES[f.dtype]}) AS {f.name}" for f in later)
        con.execute(f'CREATE TEMP VIEW {table.name} AS SELECT *, {extra} FROM '
                    f'"{db}".main.{table.name}')
