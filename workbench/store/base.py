"""Opening a store, its transactions, and the few helpers every table module uses.

Every statement the store runs goes through :class:`Connection`, which turns DuckDB's
reports of a damaged file, a refused write or a full disk into one :class:`StoreError`
(:mod:`workbench.store.errors`); a read-only store is opened read-only by DuckDB too
(several readers may share it, and a folder without write permission is no obstacle).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import duckdb
import numpy as np
import pandas as pd

from workbench.model import as_utc
from workbench.store.errors import RESTORE_FIX, StoreError, open_error, query_error
from workbench.store.files import check_blocks, check_store_file
from workbench.store.schema import ensure_schema, file_version

log = logging.getLogger("workbench.store")


class Connection:
    """A DuckDB connection whose :meth:`execute` raises :class:`StoreError` for a damaged
    file, a refused write or a full disk (other errors, e.g. a broken constraint, pass as
    DuckDB raised them). Every other attribute is the DuckDB connection's."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str, read_only: bool, *,
                 what: str = "store", fix: str = RESTORE_FIX) -> None:
        self.raw = con
        self.path = path
        self.read_only = read_only
        self.what = what
        self.fix = fix

    def execute(self, sql: str, parameters: object = None) -> Connection:
        try:
            self.raw.execute(sql, parameters)
        except duckdb.Error as exc:
            known = query_error(exc, self.path, writing=not self.read_only, what=self.what,
                                fix=self.fix)
            if known is None:
                raise
            raise known from None
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class StoreBase:
    """A DuckDB file holding the workbench's data (the tables: the other modules of
    :mod:`workbench.store`).

    Parameters
    ----------
    path : str or Path
        The file (created when absent). ``":memory:"`` gives a throw-away store.
    read_only : bool
        Open without write access (several readers may share a file; the folder need not
        be writable). A file of an older schema is read as it is, its later columns empty.
    what, fix : str
        How a message about damage names the file and what it says to do (a side file of
        runs is not restored from a backup but planned again).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | Path = "workbench.duckdb", read_only: bool = False, *,
                 what: str = "store", fix: str = RESTORE_FIX) -> None:
        self.path = str(path)
        self.read_only = read_only
        disk = None if self.path == ":memory:" else Path(self.path)
        if disk is not None:
            if read_only and not disk.exists():
                folder = Path(os.path.abspath(disk)).parent
                raise StoreError(
                    f"store {self.path} does not exist; create it first" if folder.is_dir()
                    else f"store {self.path} does not exist: the folder {folder} does not "
                    "exist either; check --db")
            check_store_file(disk, what=what, fix=fix, writing=not read_only)
        try:
            raw = duckdb.connect(self.path, read_only=read_only)
        except duckdb.Error as exc:
            raise open_error(exc, self.path, read_only=read_only, what=what, fix=fix) from None
        self.con = Connection(raw, self.path, read_only, what=what, fix=fix)
        try:
            if disk is not None:
                check_blocks(self.con, disk, what=what, fix=fix)
            ensure_schema(self.con, self.path, read_only)
        except BaseException:
            raw.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Run a block atomically: on any error everything it wrote is rolled back."""
        if self.read_only:
            raise StoreError(f"store {self.path} was opened read-only")
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
        except BaseException:
            rollback(self.con)
            raise
        else:
            self.con.execute("COMMIT")

    # -- generic -----------------------------------------------------------------------
    def schema_version(self) -> int | None:
        """The file's schema version (None: an empty file; -1: tables but no version)."""
        return file_version(self.con)

    def table(self, name: str) -> pd.DataFrame:
        """The whole of one table as a DataFrame (for inspection and tests)."""
        return self.con.execute(f'SELECT * FROM "{name}"').df()


def rollback(con: Connection) -> None:
    """Roll back the open transaction; one that DuckDB already ended (a failed commit) is
    left as it is."""
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException:
        log.debug("no transaction left to roll back on %s", con.path)


def insert_frame(con: Connection, table: str, frame: pd.DataFrame, *,
                 or_replace: bool = False) -> None:
    """Insert ``frame``'s rows into ``table`` by column name (the frame's columns, in any
    order, must be columns of the table; the others take their defaults)."""
    if frame.empty:
        return
    con.register("_incoming", frame)
    try:
        cols = ", ".join(f'"{c}"' for c in frame.columns)
        verb = "INSERT OR REPLACE" if or_replace else "INSERT"
        con.execute(f'{verb} INTO "{table}" ({cols}) SELECT {cols} FROM _incoming')
    finally:
        con.unregister("_incoming")


def records(con: Connection, sql: str, *params: object) -> list[dict[str, Any]]:
    """The rows of a query as dicts of Python values (None for SQL NULL and NaN)."""
    frame = con.execute(sql, list(params)).df()
    return [{k: (None if is_null(v) else py(v)) for k, v in rec.items()}
            for rec in frame.to_dict("records")]


def is_null(v: object) -> bool:
    return v is None or v is pd.NaT or (isinstance(v, float) and np.isnan(v))


def py(v: object) -> object:
    """A numpy or pandas scalar as the Python value (datetime, int, float)."""
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def naive_utc(value: datetime | None) -> datetime | None:
    """A time as the store keeps it: naive UTC."""
    return None if value is None else as_utc(value).replace(tzinfo=None)


def now_utc() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
