"""The store's supply: the series a site's renewables read (``energy_series``: generation,
irradiance, wind speed per series name and UTC time) and each scenario's supply entries
(``supply``: sources with their output per slot, batteries, demand charges;
:mod:`workbench.supply`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

import pandas as pd

from workbench.events import GridEvent
from workbench.store.base import Connection, StoreBase, insert_frame, naive_utc
from workbench.supply import Source, Supply, entry_from_dict, entry_to_dict


class SupplyTables(StoreBase):
    """Energy series (write, read) and scenarios' supply entries (write within a scenario's
    transaction, read)."""

    def write_energy_series(self, frame: pd.DataFrame) -> int:
        """Insert or replace rows of one series: ``time_utc, region, kind, value, source``
        (``kind`` one of generation_kw, irradiance_w_m2, wind_speed_m_s)."""
        rows = pd.DataFrame({
            "region": frame["region"].astype(str).to_numpy(),
            "kind": frame["kind"].astype(str).to_numpy(),
            "time_utc": pd.DatetimeIndex(frame["time_utc"]).tz_localize(None)
            if pd.DatetimeIndex(frame["time_utc"]).tz is not None
            else pd.DatetimeIndex(frame["time_utc"]),
            "value": frame["value"].to_numpy(float),
            "source": frame["source"].astype(str).to_numpy()})
        with self.transaction() as con:
            insert_frame(con, "energy_series", rows, or_replace=True)
        return len(rows)

    def energy_series(self, region: str, start: datetime | None = None,
                      end: datetime | None = None) -> pd.DataFrame:
        """Rows of series ``region`` (every kind it holds), in time order."""
        sql = "SELECT * FROM energy_series WHERE region = ?"
        params: list[object] = [region]
        if start is not None:
            sql += " AND time_utc >= ?"
            params.append(naive_utc(start))
        if end is not None:
            sql += " AND time_utc < ?"
            params.append(naive_utc(end))
        return self.con.execute(sql + " ORDER BY kind, time_utc", params).df()

    def energy_series_names(self) -> dict[str, list[str]]:
        """Stored series name -> the kinds it holds."""
        out: dict[str, list[str]] = {}
        for region, kind in self.con.execute(
                "SELECT DISTINCT region, kind FROM energy_series ORDER BY 1, 2").fetchall():
            out.setdefault(str(region), []).append(str(kind))
        return out

    def load_supply(self, scenario: str) -> Supply:
        """A scenario's supply (empty when it has none)."""
        rows = self.con.execute(
            "SELECT spec, output_kw FROM supply WHERE scenario = ? ORDER BY position",
            [scenario]).fetchall()
        entries = [entry_from_dict(json.loads(spec), None if out is None else json.loads(out))
                   for spec, out in rows]
        return _supply_of(entries)


def save_supply(con: Connection, scenario: str, supply: Supply) -> None:
    """Write a scenario's supply entries (inside the caller's transaction; the caller has
    deleted the scenario's old rows)."""
    entries: list[object] = [*supply.sources, *supply.batteries, *supply.demand_charges,
                             *supply.grid_events]
    if not entries:
        return
    frame = pd.DataFrame([{
        "scenario": scenario, "position": i,
        "name": e.label if isinstance(e, GridEvent) else e.name,  # type: ignore[attr-defined]
        "datacenter": e.datacenter, "kind": (  # type: ignore[attr-defined]
            e.kind if isinstance(e, Source) else "grid_event" if isinstance(e, GridEvent)
            else type(e).__name__.lower()),
        "spec": json.dumps(entry_to_dict(e)),  # type: ignore[arg-type]
        "output_kw": json.dumps(e.available_kw.tolist()) if isinstance(e, Source) else None,
    } for i, e in enumerate(entries)])
    insert_frame(con, "supply", frame)


def _supply_of(entries: Iterable[object]) -> Supply:
    from workbench.supply import Battery, DemandCharge

    items = list(entries)
    return Supply(sources=tuple(e for e in items if isinstance(e, Source)),
                  batteries=tuple(e for e in items if isinstance(e, Battery)),
                  demand_charges=tuple(e for e in items if isinstance(e, DemandCharge)),
                  grid_events=tuple(e for e in items if isinstance(e, GridEvent)))
