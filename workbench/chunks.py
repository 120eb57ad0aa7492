"""Columnar accumulation of a run's rows: fixed-type numpy chunks instead of one Python
object per row.

The simulator hands each slot's rows to a :class:`ColumnChunks` as one list per column
(:meth:`ColumnChunks.extend`); every ``chunk_rows`` rows the lists become numpy arrays of
the declared dtype (8 bytes a number instead of a ~24-byte float object and a dict slot
per cell; text columns keep references to the strings the scenario already holds), and
:meth:`ColumnChunks.frame` joins the chunks into one DataFrame at the end. Memory per row
is then the row's width in bytes, independent of how many Python objects made it.

:class:`QueueTrace` keeps a policy's queues the same way, in long form (slot, queue,
value): a look-ahead run prices every planned job (``mu:<job>``), so the wide table of
one column per queue would hold slots x jobs cells (3,000 slots x 47,000 jobs: 1.1 GB) of
which only the active jobs' are set. Per-kind totals per slot (what the metrics need)
come from the long form; the wide table is built only when asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import DTypeLike, NDArray

CHUNK_ROWS = 65_536
"""Rows per chunk: lists up to this many rows, then numpy arrays."""


class ColumnChunks:
    """Rows of fixed columns accumulated as typed numpy chunks.

    Parameters
    ----------
    dtypes : mapping column -> numpy dtype or None
        The columns in order and the dtype of each (``object`` for text and timestamps;
        None: numbers, booleans or objects as the values of each chunk are).
    chunk_rows : int, optional
        Rows kept as Python lists before they are converted into a chunk of arrays
        (default :data:`CHUNK_ROWS`, read when the buffer is made).
    """

    def __init__(self, dtypes: Mapping[str, DTypeLike | None],
                 chunk_rows: int | None = None) -> None:
        chunk_rows = CHUNK_ROWS if chunk_rows is None else chunk_rows
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.dtypes = {str(k): None if v is None else np.dtype(v) for k, v in dtypes.items()}
        self.columns = tuple(self.dtypes)
        self.chunk_rows = int(chunk_rows)
        self._chunks: list[dict[str, NDArray[Any]]] = []
        self._open: dict[str, list[Any]] = {c: [] for c in self.columns}
        self._open_rows = 0
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def extend(self, cols: Mapping[str, Sequence[Any]]) -> None:
        """Append rows given as one equally long sequence per column (every column)."""
        n = len(cols[self.columns[0]]) if self.columns else 0
        if n == 0:
            return
        for c in self.columns:
            if len(cols[c]) != n:
                raise ValueError(f"column {c!r} has {len(cols[c])} values, expected {n}")
        for c in self.columns:
            self._open[c].extend(cols[c])
        self._open_rows += n
        self.rows += n
        if self._open_rows >= self.chunk_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._open_rows:
            return
        self._chunks.append({c: _array(self._open[c], self.dtypes[c]) for c in self.columns})
        self._open = {c: [] for c in self.columns}
        self._open_rows = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the converted chunks (not counting the strings they point to)."""
        return int(sum(a.nbytes for ch in self._chunks for a in ch.values()))

    def column(self, name: str) -> NDArray[Any]:
        """One column over every row so far, as one array."""
        self._flush()
        parts = [ch[name] for ch in self._chunks]
        if not parts:
            return np.zeros(0, dtype=self.dtypes[name] or object)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def frame(self, release: bool = True) -> pd.DataFrame:
        """Every row as one DataFrame with the declared columns (and dtypes).

        With ``release`` the chunks are dropped column by column as the frame takes them,
        so the peak is about one copy of the rows plus one column.
        """
        self._flush()
        if not self.rows:
            # As pandas builds a frame from no rows: the columns, no dtype.
            return pd.DataFrame([], columns=list(self.columns))
        data: dict[str, NDArray[Any]] = {}
        for c in self.columns:
            data[c] = self.column(c)
            if release:
                for ch in self._chunks:
                    ch.pop(c)
        if release:
            self._chunks = []
            self.rows = 0
        return pd.DataFrame(data, copy=False)


def _array(values: list[Any], dtype: np.dtype[Any] | None) -> NDArray[Any]:
    """The values as one array: of ``dtype``, else numbers and booleans as numpy makes
    them and anything else (text, JSON, mixed) as objects. Text never goes through numpy's
    fixed-width strings: ``np.asarray`` of strings pads every cell to the longest (4 bytes a
    character), and a look-ahead's per-slot queue JSON over a trace made that 2.5 GB."""
    if dtype is not None:
        return np.asarray(values, dtype=dtype)
    if any(not isinstance(v, int | float | bool | np.number | np.bool_) for v in values):
        return np.asarray(values, dtype=object)
    return np.asarray(values)


class QueueTrace:
    """A policy's queues after each slot, in long form (slot, queue, value).

    :meth:`add` takes one slot's queue mapping; :meth:`frame` is the wide table (one column
    per queue, one row per slot, NaN where a queue did not exist), :meth:`kind_totals` the
    sum per kind (the part of a name before ``:``) and slot, 0 where none.
    """

    def __init__(self, chunk_rows: int | None = None) -> None:
        self._names: dict[str, int] = {}
        self._rows = ColumnChunks({"slot": np.int32, "queue": np.int32, "value": np.float64},
                                  chunk_rows)
        self.n_slots = 0

    def add(self, slot: int, queues: Mapping[str, float]) -> None:
        """Record the queues after slot ``slot`` (slots are added in order, each once)."""
        self.n_slots = max(self.n_slots, slot + 1)
        if not queues:
            return
        codes = [self._names.setdefault(str(k), len(self._names)) for k in queues]
        self._rows.extend({"slot": [slot] * len(codes), "queue": codes,
                           "value": [float(v) for v in queues.values()]})

    @property
    def names(self) -> list[str]:
        """Queue names in the order they first appeared."""
        return list(self._names)

    def __len__(self) -> int:
        return len(self._rows)

    def _long(self) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.float64]]:
        return (self._rows.column("slot"), self._rows.column("queue"),
                self._rows.column("value"))

    def kind_totals(self) -> pd.DataFrame:
        """Per slot, the sum of the queues of each kind (``<kind>:<key>``), 0 where none.

        Columns: the kinds (sorted), index the slots ``0 .. n_slots - 1``.
        """
        slot, queue, value = self._long()
        kinds = [n.split(":", 1)[0] for n in self._names]
        order = sorted(set(kinds))
        kind_code = np.array([order.index(k) for k in kinds], dtype=np.int64)
        out = np.zeros((self.n_slots, len(order)))
        if slot.size:
            np.add.at(out, (slot, kind_code[queue]), value)
        return pd.DataFrame(out, columns=order,
                            index=pd.RangeIndex(self.n_slots, name="slot"))

    def frame(self) -> pd.DataFrame:
        """The wide table: one column per queue (first-appearance order), one row per slot.

        Memory is slots x queues cells: for traces of thousands of jobs prefer
        :meth:`kind_totals` or :meth:`series`.
        """
        slot, queue, value = self._long()
        out = np.full((self.n_slots, len(self._names)), np.nan)
        if slot.size:
            out[slot, queue] = value
        return pd.DataFrame(out, columns=self.names,
                            index=pd.RangeIndex(self.n_slots, name="slot"))

    def series(self, name: str) -> pd.Series:
        """One queue over the slots (NaN where it did not exist), without the wide table."""
        code = self._names.get(name)
        out = np.full(self.n_slots, np.nan)
        if code is not None:
            slot, queue, value = self._long()
            hit = queue == code
            out[slot[hit]] = value[hit]
        return pd.Series(out, index=pd.RangeIndex(self.n_slots, name="slot"), name=name)

