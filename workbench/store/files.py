"""Checks on a store file before (and just after) DuckDB opens it: the kind of path, read
access, the file's kind and whether it is whole.

A DuckDB file starts with three 4 KiB headers: the main header (``DUCK`` at bytes 8..12)
and two database headers, of which the one with the higher iteration count is current; then
come whole blocks of ``block_alloc_size`` bytes (256 KiB by default). A database header
holds, after its checksum, ``iteration, meta_block, free_list, block_count,
block_alloc_size`` as little-endian 64-bit integers. A whole file is therefore ``3 x 4096 +
k x block_alloc_size`` bytes long and holds at least every used block (DuckDB trims free
blocks off the end, so ``k`` may be below ``block_count``). A file that ends inside a block,
or is shorter than its used blocks (``PRAGMA database_size``), was cut short (a failed copy,
a full disk): DuckDB would fail on the first query that reads a missing block, deep inside a
command; :func:`check_store_file` and :func:`check_blocks` say so before any command runs.
Both leave a file with a write-ahead log beside it to DuckDB: a process killed while it
checkpointed leaves a block started at the end and its log, from which DuckDB recovers.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import Any

from workbench.store.errors import RESTORE_FIX, StoreError, damaged, read_denied, write_denied

DUCKDB_MAGIC = b"DUCK"
"""Bytes 8..12 of every DuckDB database file."""

HEADER_BYTES = 4096
"""Size of each of the three headers at the start of a DuckDB file."""

_BLOCK_ALLOC_DEFAULT = 262_144
"""Block size of DuckDB files whose header does not record it (DuckDB 1.0)."""


def block_size(head: bytes) -> int | None:
    """The block size the file's current database header records, or None when the
    header is not one this check knows (the check is then left to DuckDB)."""
    best: tuple[int, int] | None = None
    for offset in (HEADER_BYTES, 2 * HEADER_BYTES):
        raw = head[offset + 8: offset + 48]
        if len(raw) < 40:
            return None
        iteration, _meta, _free, _blocks, alloc = struct.unpack("<QqqQQ", raw)
        if best is None or iteration > best[0]:
            best = (iteration, alloc)
    if best is None:
        return None
    alloc = best[1]
    if alloc == 0:
        return _BLOCK_ALLOC_DEFAULT
    return alloc if 4096 <= alloc <= 1 << 28 and not alloc & (alloc - 1) else None


def check_store_file(path: Path, *, what: str = "store", fix: str = RESTORE_FIX,
                     writing: bool = False) -> None:
    """Refuse, before DuckDB opens it, a path that cannot be a store: a folder, a file in a
    folder that does not exist, one this user may not read (or, ``writing``, not write),
    a file of another kind (DuckDB would try to read an SQLite file through an extension
    it downloads), or a store cut short. ``what`` and ``fix`` word the damage message."""
    if path.is_dir():
        raise StoreError(f"{what} {path} is a folder; pass --db with a file name, e.g. "
                         f"{path / 'workbench.duckdb'}")
    folder = path.parent if str(path.parent) else Path(".")
    if not path.exists():
        if not folder.is_dir():
            raise StoreError(f"cannot create {what} {path}: the folder {folder} does not "
                             "exist; create it or pass --db in an existing folder")
        if writing and not os.access(folder, os.W_OK):
            raise StoreError(f"cannot create {what} {path}: the folder {folder} is not "
                             "writable; pass --db with a file in a folder you can write")
        return
    try:
        with path.open("rb") as fh:
            head = fh.read(3 * HEADER_BYTES)
            size = os.fstat(fh.fileno()).st_size
    except PermissionError:
        raise read_denied(path) from None
    except OSError as exc:
        if exc.errno == errno.EACCES:
            raise read_denied(path) from None
        raise StoreError(f"cannot read {what} {path}: {exc.strerror}; check the disk and "
                         "its permissions") from None
    if not head:
        raise StoreError(f"{what} {path} is an empty file (0 bytes), not a DuckDB store; "
                         "remove it and a command that writes creates the store there, or "
                         "pass --db with another file")
    if len(head) < 12 or head[8:12] != DUCKDB_MAGIC:
        if len(head) < 12 and DUCKDB_MAGIC.startswith(head[8:12]):
            raise damaged(path, f"{size} bytes, shorter than a DuckDB header", what, fix)
        raise StoreError(f"{path} is not a DuckDB store (another kind of file); pass --db "
                         "with a store file, or a new name to create one")
    if len(head) < 3 * HEADER_BYTES:
        raise damaged(path, f"cut short inside its header: {size:,} bytes", what, fix)
    alloc = block_size(head)
    # A write killed mid-checkpoint leaves a block started at the end, with the log beside
    # the file: DuckDB recovers the store from the log (the kill tests), so it is whole.
    if alloc is not None and (size - 3 * HEADER_BYTES) % alloc and not _has_wal(path):
        raise damaged(path, f"cut short inside a block: {size:,} bytes, where a whole file "
                      f"is {3 * HEADER_BYTES:,} plus whole blocks of {alloc:,}", what, fix)
    if writing and not (os.access(path, os.W_OK) and os.access(folder, os.W_OK)):
        raise write_denied(path)


def _has_wal(path: Path) -> bool:
    """Whether a non-empty write-ahead log lies beside the store file (a write was cut
    short before its checkpoint ended; DuckDB replays the log when it opens the file)."""
    wal = path.with_name(path.name + ".wal")
    return wal.exists() and wal.stat().st_size > 0


def check_blocks(con: Any, path: Path, *, what: str = "store", fix: str = RESTORE_FIX
                 ) -> None:
    """Refuse an open store file shorter than its used blocks (``PRAGMA database_size``:
    block size and used blocks). Skipped while a write-ahead log lies beside the file
    (its blocks may not be on disk yet)."""
    if _has_wal(path):
        return
    rows = con.execute("PRAGMA database_size").fetchall()
    if not rows:
        return
    alloc, used = int(rows[0][2]), int(rows[0][4])
    need = 3 * HEADER_BYTES + used * alloc
    size = path.stat().st_size
    if size < need:
        raise damaged(path, f"cut short: {size:,} bytes, its {used:,} used blocks need "
                      f"{need:,}", what, fix)
