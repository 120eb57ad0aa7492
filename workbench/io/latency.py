"""Latency matrices: round-trip times between grid zones (or cloud regions), in ms.

The layout is the one of ``gcp_latency_matrix.csv`` (umassos/decarbonization-potential): a
header ``origin,<zone>,<zone>,...`` and one row per origin zone. A zone that appears twice
(two cloud regions in one grid zone) keeps its first row and column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from workbench.io import _table, bounds
from workbench.io.errors import InputError


def read_latency_matrix(path: str | Path) -> pd.DataFrame:
    """The matrix as a DataFrame: index = origin zone, columns = destination zone (ms)."""
    table = _table.read_table(path)
    if not table.header or table.header[0] != "origin":
        raise InputError(path, f"the first column is {table.header[0]!r}, not 'origin'",
                         "pass a latency matrix with an 'origin' column", line=table.header_line)
    dests = table.header[1:]
    origins = [r[0].strip() for r in table.rows]
    values = np.empty((len(origins), len(dests)))
    for j, name in enumerate(dests):
        col, _ = _table.numbers_from_strings(
            pd.Series([r[j + 1] for r in table.rows], dtype=object), table.lines, table.path,
            name)
        if (col < 0).any():
            i = int(np.flatnonzero(col < 0)[0])
            raise InputError(path, f"negative latency {col[i]:g}", "correct the value",
                             line=int(table.lines[i]), column=name)
        bounds.check(col, bounds.LATENCY, table.path, name, where=lambda i: int(table.lines[i]))
        values[:, j] = col
    frame = pd.DataFrame(values, index=origins, columns=dests)
    frame = frame.loc[~frame.index.duplicated(), ~frame.columns.duplicated()]
    return frame


def latency_ms(matrix: pd.DataFrame, a: str, b: str) -> float | None:
    """Round-trip latency between zones ``a`` and ``b`` (the mean of both directions when
    both are listed), or None when the matrix lacks either."""
    found = [float(matrix.at[x, y]) for x, y in ((a, b), (b, a))
             if x in matrix.index and y in matrix.columns]
    return float(np.mean(found)) if found else None
