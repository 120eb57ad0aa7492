"""The store's grid series: price and carbon intensity per region and UTC time (long format,
:data:`workbench.schema.GRID_ROW`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime

import duckdb
import numpy as np
import pandas as pd

from workbench.store.base import Connection, StoreBase, naive_utc
from workbench.store.errors import StoreError
from workbench.store.schema import GRID_SERIES

GRID_ONE_THREAD_ROWS = 100_000
"""Grid writes of at least this many rows run on one DuckDB thread (a steadier peak)."""

_TEXT = ("region", "currency", "source")


def is_constant(column: pd.Series) -> bool:
    """Whether a column holds one value (or one missing value) in every row; cheap for the
    categorical columns the grid readers give."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        return len(codes) == 0 or bool((codes == codes[0]).all())
    return column.nunique(dropna=False) <= 1


class GridTables(StoreBase):
    """Grid series: write (upsert) and read."""

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
                upsert_grid(con, frame)
        finally:
            self.con.unregister("_grid_in")  # no-op unless a failed write left it
        return len(frame)

    @contextmanager
    def _one_thread(self, wanted: bool) -> Iterator[None]:
        """Run a block on one DuckDB thread (``wanted``), then restore the setting.

        For large grid writes: with two threads the primary-key index makes an import's
        peak memory vary from run to run, with one it holds steady, in about the same time
        (docs/results.md, section 9).
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
            params.append(naive_utc(start))
        if end is not None:
            sql += " AND time_utc < ?"
            params.append(naive_utc(end))
        return self.con.execute(sql + " ORDER BY region, time_utc", params).df()

    def grid_regions(self) -> list[str]:
        return [r[0] for r in self.con.execute(
            "SELECT DISTINCT region FROM grid_series ORDER BY region").fetchall()]

    def grid_value_counts(self) -> dict[str, tuple[int, int]]:
        """Per stored region, how many rows hold a price and how many a carbon intensity."""
        return {str(r[0]): (int(r[1]), int(r[2])) for r in self.con.execute(
            "SELECT region, count(price_per_kwh), count(carbon_g_per_kwh) FROM grid_series "
            "GROUP BY region").fetchall()}

    def grid_currencies(self, region: str) -> list[str]:
        """The currencies of the prices ``region`` holds, sorted."""
        return sorted(str(r[0]) for r in self.con.execute(
            "SELECT DISTINCT currency FROM grid_series WHERE region = ? AND price_per_kwh "
            "IS NOT NULL AND currency IS NOT NULL", [region]).fetchall())

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


def upsert_grid(con: Connection, frame: pd.DataFrame) -> None:
    """Insert or update the grid rows of ``frame`` inside the caller's transaction
    (:meth:`GridTables.write_grid_series`)."""
    if frame.empty:
        return
    missing = {"time_utc", "region"} - set(frame.columns)
    if missing:
        raise StoreError(f"grid rows lack columns {sorted(missing)}")
    # One file gives one region, currency and source: pass those as constants so that
    # DuckDB scans only typed columns (a 2 M-row import would convert 6 M Python strings
    # and copy the frame several times).
    constant = all(c not in frame or is_constant(frame[c]) for c in _TEXT)
    params: list[object] = []
    if constant:
        data, times, dup, params, select = _typed_constant(frame)
    else:
        times = pd.to_datetime(frame["time_utc"], utc=True).dt.tz_localize(None)
        data = frame.reindex(columns=list(GRID_SERIES.names)).copy()
        data["time_utc"] = times
        dup = data.duplicated(["region", "time_utc"]).to_numpy()
        for col in ("price_per_kwh", "carbon_g_per_kwh"):
            data[col] = data[col].astype("float64")
        for col in _TEXT:
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
        merge_grid(con, select, params, regions, times)
    finally:
        try:
            con.unregister("_grid_in")
        except duckdb.TransactionException:
            pass  # a failed statement aborted the transaction: forgotten after ROLLBACK


def _typed_constant(frame: pd.DataFrame
                    ) -> tuple[pd.DataFrame, pd.Series, np.ndarray, list[object], str]:
    """The frame of one region, currency and source as typed columns: the data to scan,
    its times, which rows repeat a time, the constants and the ``SELECT`` typing them."""
    # Naive datetime64 (what every reader gives) is scanned as it is, no copy.
    col_t = frame["time_utc"]
    t = (col_t.to_numpy() if col_t.dtype.kind == "M" and getattr(col_t.dt, "tz", None)
         is None else pd.to_datetime(col_t, utc=True).dt.tz_localize(None).to_numpy())
    times = pd.Series(t, copy=False)
    # Sorted strictly increasing times (every file reader checks that) cannot repeat: only
    # unsorted frames pay for a hash of the times.
    ordered = len(t) < 2 or bool((t[1:] > t[:-1]).all())
    dup = np.zeros(len(t), bool) if ordered else pd.Index(t).duplicated()
    params: list[object] = [None if c not in frame or pd.isna(frame[c].iloc[0]) else
                            str(frame[c].iloc[0]) for c in _TEXT]
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
    return data, times, np.asarray(dup), params, select


def merge_grid(con: Connection, select: str, params: list[object], regions: list[object],
                times: pd.Series) -> None:
    """Upsert the registered ``_grid_in`` (``select`` types its columns).

    A file whose rows meet no stored (region, time) -- the usual first import -- is a plain
    ``INSERT``. Otherwise the stored rows it meets are updated in place and only the new
    ones inserted: ``INSERT ... ON CONFLICT DO UPDATE`` gives the same rows but takes more
    memory than a plain insert into the primary-key index (docs/results.md, section 9).
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
