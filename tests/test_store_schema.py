"""The store's tables come from the record schemas: the same tables at every version as the
workbench wrote before (pinned), migrations from every version, old files read read-only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from helpers_sim import tiny_scenario, training

from workbench.model import Job
from workbench.schema import JOB, MIGRATION, PLAN_ROW, Field, Record
from workbench.store import SCHEMA_VERSION, Store, StoreError
from workbench.store.jobs import job_row
from workbench.store.schema import MIGRATIONS, PLAN_ROWS, TABLES, migrate

PINNED = Path(__file__).parent / "data" / "store_schema_history.json"
"""Every table (columns with type, NOT NULL and default; constraints) at versions 1..6 as
the single-module store of commit d36855f made them: ``_SCHEMA_V1`` and its migrations
executed on an empty DuckDB database and read back from ``duckdb_columns()`` and
``duckdb_constraints()`` (the description :func:`describe` gives)."""


def describe(con: Any) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for t, c, typ, nullable, default in con.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default "
            "FROM duckdb_columns() WHERE database_name = current_database() AND "
            "schema_name = 'main' ORDER BY table_name, column_index").fetchall():
        spec = (f"{c} {typ}" + ("" if nullable else " NOT NULL")
                + (f" DEFAULT {default}" if default is not None else ""))
        out.setdefault(t, {"columns": [], "constraints": []})["columns"].append(spec)
    for t, kind, cols in con.execute(
            "SELECT table_name, constraint_type, constraint_column_names "
            "FROM duckdb_constraints() WHERE database_name = current_database() AND "
            "schema_name = 'main' AND constraint_type <> 'NOT NULL' ORDER BY ALL").fetchall():
        out[t]["constraints"].append(f"{kind} ({', '.join(cols)})")
    return out


def _at(version: int) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    migrate(con, None, version)
    return con


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
def test_every_version_has_the_tables_the_workbench_wrote(version: int) -> None:
    pinned = json.loads(PINNED.read_text())
    assert set(pinned) == {str(v) for v in range(1, SCHEMA_VERSION + 1)}
    assert describe(_at(version)) == pinned[str(version)]


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_file_of_any_version_migrates_to_the_tables_of_a_new_one(tmp_path: Path,
                                                                   version: int) -> None:
    db = tmp_path / f"v{version}.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, None, version)
    con.close()
    with Store(db) as store:
        assert store.schema_version() == SCHEMA_VERSION
        migrated = describe(store.con)
    with Store(tmp_path / "new.duckdb") as store:
        assert describe(store.con) == migrated


def test_tables_follow_the_records() -> None:
    """The stored fields of each shared record are its table's columns, in the file's
    order; a job row has exactly the job record's fields."""
    def stored(record: Record) -> list[str]:
        return [f.name for f in sorted(record.stored, key=lambda f: f.since or 0)]

    assert list(PLAN_ROWS.names) == ["run_id", *stored(PLAN_ROW)]
    assert list(MIGRATIONS.names) == ["run_id", *stored(MIGRATION)]
    job = Job(job_id="j", kind="training", app="cifar10", arrival=pd.Timestamp(
        "2025-07-01", tz="UTC").to_pydatetime(), home="a", requested_gpus=1, gpu_counts=(1,),
        batch_size=64, work_samples=1e6)
    assert list(job_row("s", job)) == list(JOB.names)
    for table in TABLES:
        assert all((f.since or 0) >= table.since for f in table.fields), table.name
        assert set(table.key) <= {f.name for f in table.fields if f.required}, table.name


def test_a_field_of_an_unknown_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        Field("x", "decimal")
    with pytest.raises(ValueError, match="names a field twice"):
        Record("r", (Field("a", "int"), Field("a", "float")))
    with pytest.raises(KeyError, match="no fields"):
        PLAN_ROW.row_type(["job_id", "nope"])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _old_store(tmp_path: Path, version: int) -> Path:
    """A version-``version`` file holding the tiny scenario and one run (as a workbench of
    that version would have stored them: without the later columns)."""
    db = tmp_path / f"v{version}.duckdb"
    with Store(db) as store:
        store.save_scenario(tiny_scenario([training("j", slots_of_work=1.0)], n_slots=4))
        plan = pd.DataFrame({
            "slot_start": ["2025-07-01T00:00:00Z"], "slot_end": ["2025-07-01T00:15:00Z"],
            "job_id": ["j"], "region": ["a"], "gpu_type": ["A100"], "n_gpus": [2],
            "batch_size": [64], "action": ["start"], "energy_kwh": [0.2], "cost": [0.1],
            "carbon_kg": [0.08], "price_per_kwh": [0.5], "carbon_g_per_kwh": [400.0],
            "progress": [0.1], "transfer_gb": [1.0], "lost_s": [30.0], "movement_kwh": [0.01],
        })
        store.save_run({"scenario": "tiny", "policy": "greedy", "run_id": "r1"}, plan,
                       pd.DataFrame(), pd.DataFrame({"slot": [0], "energy_kwh": [0.2]}),
                       {"cost": 0.1})
    con = duckdb.connect(str(db))
    for table in TABLES:
        if table.since > version:
            con.execute(f"DROP TABLE {table.name}")
            continue
        for f in table.fields:
            if (f.since or 0) > version:
                con.execute(f"ALTER TABLE {table.name} DROP COLUMN {f.name}")
    con.execute("DELETE FROM schema_version WHERE version > ?", [version])
    con.execute("CHECKPOINT")
    con.close()
    return db


@pytest.mark.parametrize("version", [2, 5])
def test_an_old_store_is_read_read_only_without_writing(tmp_path: Path, version: int) -> None:
    db = _old_store(tmp_path, version)
    before = _digest(db)
    with Store(db, read_only=True) as store:
        assert store.schema_version() == version  # the file says what it is
        plan = store.run_plan("r1")
        assert list(plan.columns) == list(PLAN_ROWS.names[1:])
        assert plan["movement_kwh"].isna().all()  # added in 6: NULL, as a migration gives
        if version < 3:
            assert plan["transfer_gb"].tolist() == [0.0]  # added in 3 with DEFAULT 0.0
        assert store.run_info("r1")["bound"] == {}
        assert store.load_scenario("tiny").jobs[0].job_id == "j"
        assert store.device_specs() == []  # a table of version 4: empty
        with pytest.raises(StoreError, match="opened read-only"):
            store.rename_run("r1", "x")
    assert _digest(db) == before
    with Store(db) as store:  # opened to write: migrated, the rows kept
        assert store.schema_version() == SCHEMA_VERSION
        assert len(store.run_plan("r1")) == 1
