"""The one check of the files a command is asked to write (``--out``, ``--migrations-out``,
``--jobs-out``, ...), before anything runs.

An output must not be a file the store owns: writing it would lose data, or the output
itself. DuckDB keeps, beside the store file ``S``, its write-ahead log ``S.wal`` (replayed
into the store and removed when the store is next closed: an export written there is gone)
and a temporary folder ``S.tmp`` (spilled data, removed when done). Any other DuckDB file
(a side file of saved runs, ``S.runs-<time>.duckdb``, or another store) and its own log are
stores too. Two flags must not name one file, and every output must be writable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

WAL_SUFFIX = ".wal"
"""DuckDB's write-ahead log: ``<store>.wal``."""

TEMP_SUFFIX = ".tmp"
"""DuckDB's default temporary folder: ``<store>.tmp``."""

_DUCKDB_MAGIC = b"DUCK"
"""Bytes 8..12 of every DuckDB database file."""


def _same(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode where both exist (hard and symbolic
    links), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def _is_duckdb(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(12)
    except OSError:
        return False
    return len(head) == 12 and head[8:12] == _DUCKDB_MAGIC


def _within(path: Path, folder: Path) -> bool:
    p, f = path.resolve(), folder.resolve()
    return p == f or f in p.parents


def store_owned(path: Path, db: str) -> str | None:
    """What of a store ``path`` is (so that writing it would lose data or the output), or
    None: the store ``db`` itself, its write-ahead log, its temporary folder or a file in
    it, another DuckDB file (a side file of saved runs, another store), or such a file's
    write-ahead log."""
    path = Path(path)
    if db != ":memory:":
        store = Path(db)
        if _same(path, store):
            return f"the store (--db {db}); writing it would replace every stored run and series"
        if _same(path, Path(str(store) + WAL_SUFFIX)) or \
                _same(path, Path(str(store.resolve()) + WAL_SUFFIX)):
            return (f"the write-ahead log of the store {db}; DuckDB replays and removes it "
                    "when the store closes, so the file would be lost")
        if _within(path, Path(str(store) + TEMP_SUFFIX)):
            return (f"in the temporary folder of the store {db}; DuckDB removes what is "
                    "there")
    if path.is_file() and _is_duckdb(path):
        return ("a DuckDB store (a side file of saved runs, or another store); writing it "
                "would replace what it holds")
    if path.name.endswith(WAL_SUFFIX):
        owner = path.with_name(path.name[: -len(WAL_SUFFIX)])
        if owner.is_file() and _is_duckdb(owner):
            return (f"the write-ahead log of the DuckDB store {owner}; DuckDB replays and "
                    "removes it, so the file would be lost")
    return None


def unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written (checked before any run is stored), or None. A
    folder that does not exist is a reason: outputs never create folders."""
    if path.exists():
        if not path.is_file():
            return "it is not a regular file"
        return None if os.access(path, os.W_OK) else "no permission to write it"
    parent = path.parent
    if not parent.exists():
        return f"the folder {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a folder"
    return None if os.access(parent, os.W_OK) else f"no permission to write in {parent}"


def output_clash(outputs: Sequence[tuple[str, Path | None]], db: str) -> str | None:
    """Why these output files cannot be written together, or None: one of them belongs to
    a store (:func:`store_owned`), or two flags name the same file (the second would
    replace the first)."""
    seen: list[tuple[Path, str]] = []
    for flag, path in outputs:
        if path is None:
            continue
        owned = store_owned(Path(path), db)
        if owned:
            return f"{flag} {path} is {owned}: pass another file"
        for other, other_flag in seen:
            if _same(Path(path), other):
                return f"{other_flag} and {flag} name the same file {path}; pass two files"
        seen.append((Path(path), flag))
    return None


def check_outputs(outputs: Sequence[tuple[str, Path | None]], db: str) -> str | None:
    """The one check of a command's output flags, before it runs: :func:`output_clash`,
    then :func:`unwritable` for each; the first problem as one line naming the flag and the
    fix, or None."""
    clash = output_clash(outputs, db)
    if clash:
        return clash
    for flag, path in outputs:
        why = None if path is None else unwritable(Path(path))
        if why and path is not None and not Path(path).parent.exists():
            # Refused, never created: a mistyped path must not leave folders behind
            # (`--out /nonexistent/dir/plan.csv` made one at the root).
            folder = Path(path).parent
            return (f"{flag} {path}: the folder {folder} does not exist; create it first "
                    f"(mkdir -p {folder}) or pass a path in an existing folder")
        if why:
            return (f"{flag} {path}: cannot write it ({why}); pass a path in a writable "
                    "folder")
    return None
