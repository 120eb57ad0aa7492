"""What a store file holds, digested: the tests that check a command changed nothing."""

from __future__ import annotations

from pathlib import Path

import duckdb


def store_digest(path: str | Path) -> dict[str, tuple[int, int]]:
    """Every table of the store at ``path``: its row count and an order-free hash of its
    rows (XOR of row hashes), read through a read-only connection."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = [r[0] for r in con.execute("SHOW TABLES").fetchall()]
        out = {}
        for name in tables:
            n, h = con.execute(f'SELECT count(*), bit_xor(hash(t)) FROM "{name}" t').fetchone()
            out[name] = (int(n), int(h or 0))
        return out
    finally:
        con.close()


def files_beside(path: str | Path) -> set[str]:
    """Names of the files in the store's folder (a read must leave no new file there)."""
    return {p.name for p in Path(path).parent.iterdir()}
