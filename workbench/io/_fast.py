"""The streaming path of the grid importers: DuckDB's CSV reader for large, clean files.

:func:`read_head` reads only the header and the first rows of a large file (the readers
check the header and units on them); :func:`fast_series` then lets DuckDB parse the two
columns that matter straight into numbers and timestamps, without Python strings, so a
2 M-row file costs tens of MB. It accepts a file only when every row passes the same checks
as the exact reader (:mod:`workbench.io._table`): strict ISO times, plain decimal numbers,
no blanks unless dropped, in order, within bounds. At the first doubt it returns None and
the caller reads the file with the exact reader, which produces the error message naming
the line. The two paths give identical frames (tested).
"""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from workbench.io import _table, bounds
from workbench.io.errors import InputError

log = logging.getLogger(__name__)

FAST_MIN_BYTES = 4 << 20
"""Files at least this large take the streaming path (smaller ones are read exactly)."""

HEAD_BYTES = 1 << 20
"""How much of a large file :func:`read_head` reads for the header checks."""

_ISO = (r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?"
        r"([zZ]|[+-]\d{2}:?\d{2})?$")
_OFFSET = r"([zZ]|[+-]\d{2}:?\d{2})$"
_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"


def read_head(path: str | Path, delimiter: str = ",") -> _table.Table | None:
    """The header and first rows of a large CSV file as an incomplete Table, or None when
    the file is small, odd (a BOM, leading blank lines, not UTF-8) or cannot be parsed from
    its start: the caller then reads it with :func:`workbench.io._table.read_table`."""
    p = Path(path)
    try:
        if not p.is_file() or p.stat().st_size < FAST_MIN_BYTES:
            return None
        with p.open("rb") as fh:
            chunk = fh.read(HEAD_BYTES)
    except OSError:
        return None
    if chunk.startswith(b"\xef\xbb\xbf") or b"\x00" in chunk or chunk[:1] in (b"\n", b"\r"):
        return None
    cut = chunk.rfind(b"\n")
    if cut <= 0:
        return None
    try:
        text = chunk[:cut + 1].decode("utf-8")
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    except (UnicodeDecodeError, csv.Error):
        return None
    if len(rows) < 2 or not rows[0] or any(len(r) != len(rows[0]) for r in rows[1:] if r):
        return None
    header = [c.strip() for c in rows[0]]
    if len(header) == 1 or len(set(header)) != len(header):
        return None
    data = [r for r in rows[1:] if r]
    return _table.Table(str(path), header, data, np.arange(2, 2 + len(data), dtype=np.int64),
                        1, complete=False)


def fast_series(
    table: _table.Table, time_col: str, value_col: str, factor: float, bound: bounds.Bound,
    timezone: str | None, time_format: str | None, drop_missing: bool, delimiter: str = ",",
) -> tuple[pd.DatetimeIndex, np.ndarray] | None:
    """Times (naive UTC) and converted values of a large file, or None (read it exactly).

    ``table`` is :func:`read_head`'s; the checks are those of ``grid._series``.
    """
    if time_format is not None or time_col not in table.header or value_col not in table.header:
        return None
    cols = {name: "VARCHAR" for name in table.header}
    missing = ", ".join(f"'{m}'" for m in sorted(_table._MISSING) if m)
    col_t = time_col.replace('"', '""')
    col_v = value_col.replace('"', '""')
    # One pass over the file: every row's checks and typed values go into an in-memory
    # table (about 20 bytes a row), which the counts and the result then read.
    load = f"""
        CREATE TABLE typed AS
        WITH raw AS (
            SELECT trim("{col_t}") AS t, trim("{col_v}") AS v
            FROM read_csv(?, header = true, columns = ?, delim = ?, quote = '"',
                          escape = '"', auto_detect = false, strict_mode = true,
                          null_padding = false, nullstr = '\x01none\x01')
        ), checked AS (
            SELECT t, v, v IS NULL OR v = '' OR lower(v) IN ({missing}) AS gone,
                   coalesce(regexp_matches(t, '{_ISO}'), false) AS ok_t
            FROM raw
        ), flagged AS (
            SELECT *, ok_t AND regexp_matches(right(t, 6), '{_OFFSET}') AS aware,
                   gone OR regexp_matches(v, '{_NUMBER}') AS ok_v
            FROM checked
        )
        SELECT ok_t, ok_v, gone, aware,
               CASE WHEN NOT ok_t THEN NULL
                    WHEN aware THEN timezone('UTC', TRY_CAST(t AS TIMESTAMPTZ))
                    ELSE TRY_CAST(t AS TIMESTAMP) END AS t,
               CASE WHEN ok_v AND NOT gone THEN TRY_CAST(v AS DOUBLE) END AS v
        FROM flagged
    """
    stats_q = """
        SELECT
            count(*) FILTER (WHERE NOT ok_t) AS bad_t,
            count(*) FILTER (WHERE NOT ok_v) AS bad_v,
            count(*) FILTER (WHERE gone) AS n_gone,
            count(DISTINCT aware) AS kinds,
            bool_or(aware) AS any_aware,
            count(*) FILTER (WHERE NOT gone AND (t IS NULL OR v IS NULL)) AS uncast,
            count(*) AS n
        FROM typed
    """
    con = duckdb.connect()
    try:
        con.execute("SET threads = 2")
        con.execute("SET preserve_insertion_order = true")
        con.execute(load, [table.path, cols, delimiter])
        stats = con.execute(stats_q).fetchone()
        if stats is None:
            return None
        bad_t, bad_v, n_gone, kinds, any_aware, uncast, n = stats
        if (bad_t or bad_v or uncast or kinds > 1 or n == 0
                or (n_gone and not drop_missing)):
            return None
        arrays = con.execute("SELECT t, v FROM typed WHERE NOT gone").fetchnumpy()
    except duckdb.Error as exc:
        log.debug("%s: streaming read declined (%s); reading it exactly", table.path, exc)
        return None
    finally:
        con.close()
    if n_gone:
        log.warning("%s: dropped %d row(s) with a missing %s", table.path, n_gone, value_col)
    t = np.asarray(arrays["t"])
    values = np.asarray(arrays["v"], dtype=float)
    if np.ma.isMaskedArray(arrays["t"]) or np.ma.isMaskedArray(arrays["v"]):
        return None
    idx = pd.DatetimeIndex(t.astype("datetime64[ns]"))
    if ((idx < _table._EARLIEST) | (idx > _table._LATEST)).any():
        return None
    try:
        if not any_aware and timezone not in (None, "UTC"):
            idx = _table.localize(idx, _table.zone(timezone, table.path), table.path,
                                  time_col, None)
        _table.check_order(idx, None, table.path, time_col)
    except InputError:
        return None
    with np.errstate(over="ignore"):
        stored = values * factor
    if bound.outside(stored).any():
        return None
    return pd.DatetimeIndex(idx).as_unit("ns"), stored
