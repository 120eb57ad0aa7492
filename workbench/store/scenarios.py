"""The store's scenarios: the scenario row, its datacenters, GPU pools, links and jobs, and
(shared with every scenario) the grid series and profiles they read."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd

from workbench import cubes
from workbench.model import Datacenter, GpuPool, Link, Scenario, as_utc
from workbench.store.base import insert_frame, naive_utc, records
from workbench.store.errors import StoreError
from workbench.store.grid import GridTables, upsert_grid
from workbench.store.jobs import JobTables, job_row
from workbench.store.profiles import ProfileTables, upsert_profiles
from workbench.store.runs import RUN_TABLES
from workbench.store.schema import LINKS
from workbench.store.supply import SupplyTables, save_supply

SCENARIO_TABLES = ("datacenters", "gpu_pools", "links", "jobs", "supply")
"""Tables whose rows a scenario write replaces (keyed by the ``scenario`` column)."""


def grid_frame(scenario: Scenario) -> pd.DataFrame:
    """The scenario's cube in the store's long grid format."""
    cube = scenario.grid
    frame = cube[["price_per_kwh", "carbon_g_per_kwh"]].to_dataframe().reset_index()
    frame = frame.rename(columns={"time": "time_utc"})
    frame["currency"] = cube["price_per_kwh"].attrs.get("currency", scenario.currency)
    frame["source"] = cube_source(scenario)
    return frame


def cube_source(scenario: Scenario) -> str:
    """The ``source`` of grid rows that a scenario wrote itself (not imported)."""
    return own_source(scenario.name)


def own_source(name: str) -> str:
    """The ``source`` of the grid rows scenario ``name`` wrote itself."""
    return f"scenario {name}"


class ScenarioTables(GridTables, JobTables, ProfileTables, SupplyTables):
    """Scenarios: write (replace), rebuild, list and fingerprint."""

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
        links = pd.DataFrame([{"scenario": name, **asdict(lk)} for lk in scenario.links],
                             columns=list(LINKS.names))
        jobs = pd.DataFrame([job_row(name, j) for j in scenario.jobs])
        grid = grid_frame(scenario)
        # A scenario built from imported series must not write its resampled cube over
        # them: only regions the store has no data for over the horizon are written.
        covered = {r[0] for r in self.con.execute(
            "SELECT DISTINCT region FROM grid_series WHERE time_utc >= ? AND time_utc < ? "
            "AND source IS DISTINCT FROM ?",
            [naive_utc(scenario.start), naive_utc(scenario.end), cube_source(scenario)],
        ).fetchall()}
        grid = grid[~grid["region"].isin(covered)]
        with self.transaction() as con:
            con.execute("DELETE FROM scenarios WHERE name = ?", [name])
            for table in SCENARIO_TABLES:
                con.execute(f"DELETE FROM {table} WHERE scenario = ?", [name])
            # Whether the prices are a published tariff travels with the scenario: a short
            # cube cannot show its calendar repetition once reloaded.
            con.execute(
                "INSERT INTO scenarios (name, start_utc, slot_s, n_slots, currency, "
                "description, price_kind) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [name, naive_utc(scenario.start), scenario.slot_s, scenario.n_slots,
                 scenario.currency, scenario.description, cubes.price_kind(scenario.grid)],
            )
            insert_frame(con, "datacenters", dcs)
            insert_frame(con, "gpu_pools", pools)
            insert_frame(con, "links", links)
            insert_frame(con, "jobs", jobs)
            save_supply(con, name, scenario.supply)
            upsert_grid(con, grid)
            upsert_profiles(con, scenario.profiles)

    def delete_scenario(self, name: str) -> dict[str, Any]:
        """Remove scenario ``name`` in one transaction: its datacenters, pools, links and
        jobs, its stored runs (plans, migrations, slots, metrics) and the grid rows written
        by a scenario itself that no stored scenario reads any more; the imported grid
        series, job sets and profiles stay.

        Returns the counts removed (``datacenters``, ``gpu_pools``, ``links``, ``jobs``,
        ``grid_rows``) and ``runs``, the ids of the runs removed. Raises
        :class:`StoreError` when no scenario of that name is stored.
        """
        if not self.has_scenario(name):
            stored = ", ".join(self.scenario_names()) or "none"
            raise StoreError(f"no scenario {name!r} in {self.path} (stored: {stored})")
        out: dict[str, Any] = {}
        with self.transaction() as con:
            for table in SCENARIO_TABLES:
                row = con.execute(f"SELECT count(*) FROM {table} WHERE scenario = ?",
                                  [name]).fetchone()
                out[table] = int(row[0]) if row else 0
                con.execute(f"DELETE FROM {table} WHERE scenario = ?", [name])
            runs = [r[0] for r in con.execute(
                "SELECT run_id FROM runs WHERE scenario = ? ORDER BY created_utc",
                [name]).fetchall()]
            for table in RUN_TABLES[1:]:  # the runs row last: the others are found by it
                con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM runs "
                            "WHERE scenario = ?)", [name])
            con.execute("DELETE FROM runs WHERE scenario = ?", [name])
            con.execute("DELETE FROM scenarios WHERE name = ?", [name])
            # Grid rows a scenario wrote itself that no stored scenario reads any more (a
            # later scenario over the same regions reads them instead of writing its own).
            orphans = (
                "FROM grid_series WHERE starts_with(source, ?) AND substr(source, ?) NOT IN "
                "(SELECT name FROM scenarios) AND region NOT IN "
                "(SELECT DISTINCT region FROM datacenters)")
            prefix = own_source("")
            row = con.execute(f"SELECT count(*) {orphans}", [prefix, len(prefix) + 1]
                              ).fetchone()
            out["grid_rows"] = int(row[0]) if row else 0
            con.execute(f"DELETE {orphans}", [prefix, len(prefix) + 1])
        out["runs"] = runs
        return out

    def load_scenario(self, name: str) -> Scenario:
        """Rebuild a scenario from the store (its cube at the scenario's slot length)."""
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
        dcs = [Datacenter(**r) for r in records(self.con, q.format("datacenters"), name)]
        pools = [GpuPool(**r) for r in records(self.con, q.format("gpu_pools"), name)]
        links = [Link(**r) for r in records(self.con, q.format("links"), name)]
        jobs = self.load_jobs(name)
        start_utc = as_utc(start)
        end_utc = start_utc + pd.Timedelta(seconds=int(slot_s) * int(n_slots))
        regions = sorted({d.region for d in dcs})
        timezones = {d.region: d.timezone for d in dcs}
        series = self.grid_series(regions, start_utc - pd.Timedelta(days=1),
                                  end_utc + pd.Timedelta(days=1))
        cube = cubes.cube_from_series(series, slot_s=int(slot_s), start=start_utc, end=end_utc,
                                      timezones=timezones)
        history = cubes.history_cube(
            self.grid_series(regions, start_utc - pd.Timedelta(days=cubes.HISTORY_DAYS),
                             start_utc), regions, start_utc,
            timezones=timezones, currency=str(currency))
        if kind in cubes.PRICE_KINDS:
            cube.attrs["price_kind"] = str(kind)
        apps = {j.app for j in jobs}
        profiles = [p for p in self.load_profiles() if p.app in apps]
        return Scenario(
            name=name, datacenters=tuple(dcs), pools=tuple(pools), links=tuple(links),
            jobs=tuple(jobs), profiles=tuple(profiles), grid=cube, start=start_utc,
            slot_s=int(slot_s), n_slots=int(n_slots), currency=str(currency),
            description=str(description or ""), history=history,
            supply=self.load_supply(name),
        )

    def scenario_fingerprint(self, name: str) -> str:
        """A fingerprint of every stored row :meth:`load_scenario` reads for ``name``: its
        scenario row, datacenters, pools, links, jobs and supply, the whole grid series and the
        profiles (an order-free XOR of row hashes per table). A re-import that changes any
        value changes it, equal row counts or not; ``""`` when ``name`` is not stored."""
        parts = self.con.execute(
            """SELECT (SELECT bit_xor(hash(t)) FROM scenarios t WHERE name = $1),
                      (SELECT bit_xor(hash(t)) FROM datacenters t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM gpu_pools t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM links t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM jobs t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM supply t WHERE scenario = $1),
                      (SELECT bit_xor(hash(t)) FROM grid_series t),
                      (SELECT bit_xor(hash(t)) FROM profiles t)""", [name]).fetchone()
        if parts is None or parts[0] is None:
            return ""
        return "-".join(format(int(p or 0), "x") for p in parts)
