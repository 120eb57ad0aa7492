"""The DuckDB store: round trips, schema versions, atomic writes, locks."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from workbench.store import SCHEMA_VERSION, Store, StoreError
from workbench.store.schema import migrate


def _grid(region: str = "r1", n: int = 4, price: float = 0.5) -> pd.DataFrame:
    return pd.DataFrame({
        "time_utc": pd.date_range("2025-07-01", periods=n, freq="h", tz="UTC"),
        "region": region,
        "price_per_kwh": price + np.arange(n) * 0.1,
        "currency": "CNY",
        "carbon_g_per_kwh": 400.0 + np.arange(n),
        "source": "test",
    })


def test_scenario_round_trip(tmp_path: Path, seed3) -> None:
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        store.save_scenario(seed3)
    with Store(db) as store:
        back = store.load_scenario("seed3")
    assert back.datacenters == seed3.datacenters
    assert back.pools == tuple(sorted(seed3.pools, key=lambda p: (p.datacenter, p.gpu_type))) \
        or set(back.pools) == set(seed3.pools)
    assert set(back.links) == set(seed3.links)
    assert {j.job_id: j for j in back.jobs} == {j.job_id: j for j in seed3.jobs}
    assert {(p.app, p.gpu_type): p for p in back.profiles} == {
        (p.app, p.gpu_type): p for p in seed3.profiles}
    np.testing.assert_allclose(back.grid["price_per_kwh"].values,
                               seed3.grid["price_per_kwh"].sel(region=back.grid["region"]).values)
    assert (back.start, back.slot_s, back.n_slots) == (seed3.start, seed3.slot_s, seed3.n_slots)


def test_save_scenario_twice_replaces(tmp_path: Path, seed3) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        store.save_scenario(seed3)
        store.save_scenario(seed3)
        assert len(store.table("jobs")) == len(seed3.jobs)
        assert store.scenario_names() == ["seed3"]


def test_grid_upsert_merges_price_and_carbon(tmp_path: Path) -> None:
    with Store(tmp_path / "g.duckdb") as store:
        price_only = _grid().drop(columns=["carbon_g_per_kwh"])
        carbon_only = _grid().drop(columns=["price_per_kwh", "currency"])
        store.write_grid_series(price_only)
        store.write_grid_series(carbon_only)
        store.write_grid_series(carbon_only)  # importing twice adds nothing
        rows = store.grid_series(["r1"])
    assert len(rows) == 4
    assert rows["price_per_kwh"].notna().all() and rows["carbon_g_per_kwh"].notna().all()


def test_failed_write_leaves_store_intact(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        store.write_grid_series(_grid())
        before = store.table("grid_series")
        bad = pd.concat([_grid("r2"), _grid("r2")])  # duplicate (region, time) rows
        with pytest.raises(StoreError, match="duplicate grid row for region r2"):
            store.write_grid_series(bad)
        with pytest.raises(RuntimeError):
            with store.transaction() as con:
                con.execute("DELETE FROM grid_series")
                raise RuntimeError("boom")
        pd.testing.assert_frame_equal(store.table("grid_series"), before)


def test_old_schema_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, None, 1)  # a file as version 1 wrote it
    con.execute("INSERT INTO profiles VALUES ('a', 'g', '{}', 'old')")
    con.close()
    with Store(db) as store:
        assert store.schema_version() == SCHEMA_VERSION
        prof = store.table("profiles")
        assert list(prof["app"]) == ["a"] and not prof["derived"].iloc[0]
        assert "gpu_profile_runs" in set(store.con.execute("SHOW TABLES").df()["name"])


def test_newer_or_foreign_schema_is_refused(tmp_path: Path) -> None:
    newer = tmp_path / "new.duckdb"
    con = duckdb.connect(str(newer))
    con.execute("CREATE TABLE schema_version (version INTEGER, applied_utc TIMESTAMP)")
    con.execute(f"INSERT INTO schema_version VALUES ({SCHEMA_VERSION + 1}, now())")
    con.close()
    with pytest.raises(StoreError, match="newer than this workbench"):
        Store(newer)
    foreign = tmp_path / "foreign.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    with pytest.raises(StoreError, match="not written by the workbench"):
        Store(foreign)
    text = tmp_path / "text.duckdb"
    text.write_text("not a database")
    with pytest.raises(StoreError):
        Store(text)


def _hold_lock(path: str, ready: mp.synchronize.Event, done: mp.synchronize.Event) -> None:
    s = Store(path)
    ready.set()
    done.wait(30)
    s.close()


@pytest.mark.slow
def test_locked_file_gives_clear_message(tmp_path: Path) -> None:
    db = str(tmp_path / "locked.duckdb")
    Store(db).close()
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(db, ready, done))
    proc.start()
    try:
        assert ready.wait(60)
        with pytest.raises(StoreError, match="locked by another process"):
            Store(db)
    finally:
        done.set()
        proc.join(30)


def test_run_tables_round_trip(tmp_path: Path) -> None:
    plan = pd.DataFrame({
        "slot_start": ["2025-07-01T00:00:00Z"], "slot_end": ["2025-07-01T00:15:00Z"],
        "job_id": ["j1"], "region": ["a"], "gpu_type": ["A100"], "n_gpus": [2],
        "batch_size": [64], "action": ["start"], "energy_kwh": [0.2], "cost": [0.1],
        "carbon_kg": [0.08], "price_per_kwh": [0.5], "carbon_g_per_kwh": [400.0],
        "progress": [0.1],
    })
    mig = pd.DataFrame(columns=["slot_start", "job_id", "from_region", "to_region",
                                "checkpoint_gb", "transfer_s", "expected_gain", "reason"])
    slots = pd.DataFrame({"slot": [0], "energy_kwh": [0.2]})
    with Store(tmp_path / "r.duckdb") as store:
        run_id = store.save_run({"scenario": "x", "policy": "asap-home", "knobs": {"V": 1}},
                                plan, mig, slots, {"cost": 0.1, "currency": "CNY"})
        assert store.run_metrics(run_id) == {"cost": 0.1, "currency": "CNY"}
        back = store.run_plan(run_id)
        assert back["job_id"].tolist() == ["j1"] and back["n_gpus"].tolist() == [2]
        assert store.runs()["policy"].tolist() == ["asap-home"]


def test_read_only_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "nope.duckdb", read_only=True)


def test_saving_a_scenario_keeps_imported_series(tmp_path: Path, seed3) -> None:
    hourly = _grid("guangdong", n=24 * 9, price=0.3)
    hourly["time_utc"] = pd.date_range(seed3.start - pd.Timedelta(days=1), periods=24 * 9,
                                       freq="h", tz="UTC")
    with Store(tmp_path / "k.duckdb") as store:
        store.write_grid_series(hourly)
        store.save_scenario(seed3)
        kept = store.grid_series(["guangdong"])
        assert len(kept) == len(hourly) and set(kept["source"]) == {"test"}
        # Regions without imported data get the scenario's own cube.
        assert len(store.grid_series(["guizhou"])) == seed3.n_slots
        store.save_scenario(seed3)  # saving again rewrites its own rows only
        assert len(store.grid_series(["guizhou"])) == seed3.n_slots


def test_job_sets_round_trip(tmp_path: Path, seed3) -> None:
    with Store(tmp_path / "j.duckdb") as store:
        assert store.write_jobs("mine", seed3.jobs[:5]) == 5
        store.write_jobs("mine", seed3.jobs[:3])  # upsert: no duplicates
        assert len(store.load_jobs("mine")) == 5
        store.write_jobs("mine", seed3.jobs[:2], replace=True)
        assert {j.job_id for j in store.load_jobs("mine")} == {j.job_id for j in seed3.jobs[:2]}


def test_write_jobs_twice_keeps_one_row_per_job(tmp_path: Path, seed3) -> None:
    jobs = list(seed3.jobs[:5])
    with Store(tmp_path / "wb.duckdb") as store:
        assert store.write_jobs("set-a", jobs) == 5
        store.write_jobs("set-a", jobs, replace=False)
        ids = [j.job_id for j in store.load_jobs("set-a")]
        assert sorted(ids) == sorted(j.job_id for j in jobs)


def test_a_short_tariff_scenario_keeps_its_price_kind(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from workbench.forecast import default_forecast_mode
    from workbench.scenarios import build_seed3, first_hours

    day = first_hours(build_seed3(), 24, name="day")
    with Store(tmp_path / "wb.duckdb") as store:
        store.save_scenario(day)
        back = store.load_scenario("day")
    # One day cannot show its daily repetition: the saved kind says it is a tariff.
    assert default_forecast_mode(back) == "tariff"


def test_v3_runs_have_names_settings_and_can_be_deleted(tmp_path) -> None:

    with Store(tmp_path / "r.duckdb") as store:
        meta = {"scenario": "s", "policy": "p", "knobs": {"V": 2.0}, "forecast_mode": "perfect",
                "slot_s": 900}
        plan = pd.DataFrame({"slot_start": [pd.Timestamp("2025-01-01", tz="UTC")],
                             "slot_end": [pd.Timestamp("2025-01-01 00:15", tz="UTC")],
                             "job_id": ["j"], "action": ["start"]})
        rid = store.save_run(meta, plan, pd.DataFrame(), pd.DataFrame(), {"cost": 3.0})
        store.rename_run(rid, "first try")
        assert store.resolve_run("first try") == rid == store.resolve_run(rid[:4])
        info = store.run_info(rid)
        assert info["name"] == "first try" and info["settings"] == {"forecast_mode": "perfect",
                                                                    "slot_s": 900}
        summary = store.run_summaries()
        assert summary.loc[0, "cost"] == 3.0 and summary.loc[0, "name"] == "first try"
        store.delete_run(rid)
        assert store.runs().empty and store.run_plan(rid).empty
        with pytest.raises(StoreError, match="no run"):
            store.resolve_run("first try")
