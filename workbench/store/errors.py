"""What can go wrong with a store file, told apart: locked, no permission, disk full, damaged.

DuckDB reports all of these as an ``IOException`` (or, at a commit, a
``TransactionException``) whose text says which; :func:`open_error` and :func:`query_error`
read it once, here, and give the one-line :class:`StoreError` that says what to do. A
permission problem is never called damage: the advice for damage (restore from a backup)
would destroy a healthy file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import duckdb


class StoreError(RuntimeError):
    """The store cannot be opened or written; the message says why and what to do."""


class StoreLockedError(StoreError):
    """Another process holds the store's write lock (a running command or the app)."""


RESTORE_FIX = "restore it from a backup, or pass --db with another file"
"""What to do about a damaged store."""

_DAMAGE = ("could not read enough bytes", "corrupt database file", "checksum",
           "not a valid duckdb database file", "failed to read database header")
_PERMISSION = ("permission denied", "read-only file system", "operation not permitted")
_LOCK = re.compile(r"\block\b", re.IGNORECASE)  # "Could not set lock", not "block"
_NO_SPACE = ("no space left on device", "disk quota exceeded")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def damaged(path: str | Path, detail: str, what: str = "store", fix: str = RESTORE_FIX
            ) -> StoreError:
    """The one-line error for a damaged file: what is wrong and ``fix``."""
    return StoreError(f"{what} {path} is damaged ({detail}); {fix}")


def write_denied(path: str | Path) -> StoreError:
    """A store this process may read but not write: which of the file or its folder, and
    what to do (the file is healthy)."""
    p = Path(path)
    folder = Path(os.path.abspath(p)).parent
    if p.exists() and not os.access(p, os.W_OK):
        why = "the file is read-only for this user"
    elif not os.access(folder, os.W_OK):
        why = (f"its folder {folder} is not writable (DuckDB writes its log {p.name}.wal "
               "beside the store)")
    else:
        why = "the file system refused the write (permission denied or mounted read-only)"
    return StoreError(f"cannot write store {path}: {why}; the file is not damaged: get write "
                      "permission, or copy the store to a folder you can write and pass --db "
                      "with the copy (commands that only read, such as `runs list`, work as "
                      "they are)")


def read_denied(path: str | Path) -> StoreError:
    """A store this process may not read (the file is not damaged)."""
    return StoreError(f"cannot read store {path}: permission denied; the file is not damaged: "
                      "get read permission on it and its folder, or pass --db with a store you "
                      "can read")


def disk_full(path: str | Path) -> StoreError:
    """A write that ran out of disk space (DuckDB rolled it back)."""
    return StoreError(f"cannot write store {path}: the disk is full; nothing of this command "
                      "was stored: free some space (the store needs room for its log "
                      f"{Path(path).name}.wal) and run it again")


def locked(path: str | Path) -> StoreLockedError:
    return StoreLockedError(f"store {path} is locked by another process (a running `workbench` "
                            "or app); close it, or pass --db with another file")


def query_error(exc: duckdb.Error, path: str | Path, *, writing: bool, what: str = "store",
                fix: str = RESTORE_FIX) -> StoreError | None:
    """The :class:`StoreError` for a DuckDB error met while reading or writing an open store
    (no permission, disk full, damage: ``what`` and ``fix`` word it), or None for an error
    of the statement itself."""
    text = str(exc).lower()
    if any(k in text for k in _PERMISSION):
        return write_denied(path) if writing else read_denied(path)
    if any(k in text for k in _NO_SPACE):
        return disk_full(path)
    if any(k in text for k in _DAMAGE):
        return damaged(path, _first_line(exc), what, fix)
    return None


def open_error(exc: duckdb.Error, path: str | Path, *, read_only: bool, what: str = "store",
               fix: str = RESTORE_FIX) -> StoreError:
    """The :class:`StoreError` for a DuckDB error raised while opening ``path``."""
    if _LOCK.search(str(exc)):
        return locked(path)
    known = query_error(exc, path, writing=not read_only, what=what, fix=fix)
    if known is not None:
        return known
    if isinstance(exc, duckdb.IOException):
        return damaged(path, f"DuckDB cannot open it: {_first_line(exc)}", what,
                       "the file is damaged or not a store: " + fix)
    return StoreError(f"{path} is not a DuckDB store this workbench can read: "
                      f"{_first_line(exc)}")
