"""Shared reading and checking for the importers: CSV text, times, numbers.

Every helper raises :class:`~workbench.io.errors.InputError` naming the file, the line (as
an editor shows it, counting the header and any leading blank lines) and the column.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd

from workbench.io.errors import InputError, listed, quoted

log = logging.getLogger(__name__)

_MISSING = {"", "nan", "na", "n/a", "null", "none", "-"}
_OFFSET_RE = re.compile(r"(?:[zZ]|[+-]\d{2}:?\d{2})$")
_OTHER_DELIMITERS = (";", "\t", "|")
_EARLIEST = pd.Timestamp("1900-01-01")
_LATEST = pd.Timestamp("2200-01-01")


@dataclass(frozen=True)
class Table:
    """A CSV file as strings: the header, the data rows and each row's line number (or, when
    not ``complete``, the first rows only)."""

    path: str
    header: list[str]
    rows: list[list[str]]
    lines: np.ndarray
    header_line: int
    complete: bool = True
    """False for the head of a large file (``_fast.read_head``): rows are the first few."""

    def __len__(self) -> int:
        return len(self.rows)

    def has(self, name: str) -> bool:
        return name in self.header

    def find(self, pattern: str) -> list[str]:
        """Header names matching a case-insensitive regular expression."""
        rx = re.compile(pattern, re.IGNORECASE)
        return [h for h in self.header if rx.search(h)]

    def column(self, name: str) -> pd.Series:
        """One column as stripped strings, indexed by row position."""
        if name not in self.header:
            raise InputError(
                self.path, f"no column {quoted(name)}; the header (line {self.header_line}) "
                f"has {listed(self.header)}", "check the format and the column name",
                line=self.header_line,
            )
        if self.header.count(name) > 1:
            raise InputError(self.path, f"the header names column {quoted(name)} twice",
                             "rename one of them", line=self.header_line, column=name)
        j = self.header.index(name)
        return pd.Series([r[j].strip() for r in self.rows], dtype=object)

    def take(self, mask: np.ndarray) -> Table:
        """The rows where ``mask`` is true."""
        keep = np.flatnonzero(mask)
        return Table(self.path, self.header, [self.rows[i] for i in keep], self.lines[keep],
                     self.header_line, self.complete)


Places = np.ndarray | Sequence[str] | None
"""Where each value of a column sits in its file: line numbers (a CSV), entry names such as
``history[3]`` (a JSON list), or None (a command-line flag: no place in a file)."""


def _at(places: Places, i: int, column: str) -> dict[str, Any]:
    """The ``line`` and ``column`` of :class:`InputError` for value ``i``: its line in a
    CSV; in a JSON file its entry (``history[3].datetime``)."""
    if places is None:
        return {"line": None, "column": column}
    place = places[i]
    if isinstance(place, str):
        return {"line": None, "column": f"{place}.{column}"}
    return {"line": int(place), "column": column}


def _mention(places: Places, i: int, on: str = "") -> str:
    """Value ``i``'s place in words, for a message that names a second row: ``line 5``
    (``on line 5`` with ``on``), ``history[2]`` (``at history[2]``), or ``the value
    before it`` where there is no place."""
    if places is None:
        return "the value before it"
    place = places[i]
    if isinstance(place, str):
        return f"{'at ' if on else ''}{place}"
    return f"{on}line {int(place)}"


def read_text(path: str | Path) -> str:
    """The file's text (UTF-8, a leading byte-order mark dropped); empty files raise."""
    p = Path(path)
    if p.is_dir():
        raise InputError(p, "this is a folder, not a file", "pass the file's path")
    if not p.is_file():
        raise InputError(p, "no such file", "check the path")
    data = p.read_bytes()
    if not data.strip():
        raise InputError(p, "the file is empty", "export the data again; it holds no rows")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(p, f"not UTF-8 text (byte {exc.start})",
                         "save the file as UTF-8 CSV") from None
    if "\x00" in text:
        raise InputError(p, "the file holds NUL bytes: it is binary, not CSV",
                         "pass the exported CSV file")
    return text


def read_table(path: str | Path, delimiter: str = ",") -> Table:
    """Read a CSV file into a :class:`Table`.

    Leading blank lines are skipped (the NYISO files start with one); blank lines among the
    data are ignored. Every data row must have as many fields as the header.
    """
    text = read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header: list[str] | None = None
    header_line = 0
    rows: list[list[str]] = []
    lines: list[int] = []
    start_line = 1
    try:
        for row in reader:
            line = start_line
            start_line = reader.line_num + 1
            if not row or all(not c.strip() for c in row):
                continue
            if header is None:
                header = [c.strip() for c in row]
                header_line = line
                continue
            if len(row) != len(header):
                raise InputError(
                    path, f"this row has {len(row)} fields but the header has {len(header)}",
                    "fix the row (a stray delimiter or quote?) or delete it", line=line,
                )
            rows.append(row)
            lines.append(line)
    except csv.Error as exc:
        raise InputError(path, f"not valid CSV ({exc})", "fix the quoting on that line",
                         line=start_line) from None
    if header is None:
        raise InputError(path, "the file holds only blank lines", "export the data again")
    if len(header) == 1:
        for other in _OTHER_DELIMITERS:
            if other in header[0] and other != delimiter:
                name = {"\t": "tab"}.get(other, repr(other))
                raise InputError(
                    path, f"the header is one column containing {name}: the file looks "
                    f"{name}-delimited, not {delimiter!r}-delimited",
                    "convert it to comma-separated values (the generic csv format also "
                    "takes --delimiter)", line=header_line,
                )
    if not rows:
        raise InputError(path, "the file has a header but no data rows",
                         "export the data again", line=header_line)
    return Table(str(path), header, rows, np.asarray(lines, dtype=np.int64), header_line)


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; syntax errors name the line."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc.msg})", "fix the file or download it again",
                         line=exc.lineno) from None
    except RecursionError:
        raise InputError(path, "JSON nested too deeply", "pass the API response as saved") from None


def zone(name: str, path: str | Path, what: str = "--timezone") -> ZoneInfo:
    """An IANA timezone, or an error saying how to name one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(path, f"unknown timezone {name!r} ({what})",
                         "use an IANA name such as Europe/Berlin, Asia/Tokyo or UTC") from None


def parse_times(
    table: Table,
    column: str,
    timezone: str | None = None,
    time_format: str | None = None,
) -> pd.DatetimeIndex:
    """Parse a time column into naive UTC timestamps.

    Timestamps that carry an offset (``+01:00``, ``Z``) are converted with it; naive
    timestamps are local time in ``timezone`` (UTC when None). A local time that does not
    exist (the spring daylight-saving gap) raises; a repeated local time (the autumn fold)
    is read as daylight time the first time and standard time the second.
    """
    raw = table.column(column)
    return times_from_strings(raw, table.lines, table.path, column, timezone, time_format)


def times_from_strings(
    raw: pd.Series,
    lines: Places,
    path: str,
    column: str,
    timezone: str | None = None,
    time_format: str | None = None,
) -> pd.DatetimeIndex:
    """As :func:`parse_times`, for strings with their line numbers (None for JSON)."""

    # A command-line flag (``--start``) is not a row of the file and takes no --time-format.
    flag = column.startswith("--")
    raw = raw.astype(str).str.strip().reset_index(drop=True)
    blank = raw.str.lower().isin(_MISSING).to_numpy()
    if blank.any():
        i = int(np.flatnonzero(blank)[0])
        raise InputError(path, "the time is empty", "fill it in or delete the row",
                         **_at(lines, i, column))
    aware = raw.str.contains(_OFFSET_RE).to_numpy() if time_format is None else None
    try:
        # utc=True reads offsets and takes naive strings at their wall time.
        parsed = pd.to_datetime(raw, format=time_format or "ISO8601", errors="coerce",
                                utc=time_format is None)
    except (ValueError, TypeError) as exc:
        # pandas raises (rather than coercing) for a few malformed format strings and for
        # %z formats whose rows mix offsets.
        raise InputError(path, f"cannot read the times ({exc})",
                         "check --time-format (strftime codes, e.g. %Y-%m-%d %H:%M)",
                         column=column) from None
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        fix = ("pass an ISO time, e.g. 2023-07-01 or 2023-07-01T06:00Z" if flag
               else "pass --time-format with strftime codes (e.g. %d/%m/%Y %H:%M)"
               if time_format is None else f"the time does not match --time-format {time_format!r}")
        raise InputError(path, f"cannot read time {quoted(raw[i])}", fix,
                         **_at(lines, i, column))
    if aware is not None and aware.any() and not aware.all():
        i = int(np.flatnonzero(aware != aware[0])[0])
        raise InputError(
            path, f"time {quoted(raw[i])} {'lacks' if aware[0] else 'has'} a UTC offset unlike "
            f"{_mention(lines, 0)}", "write every time the same way", **_at(lines, i, column),
        )
    if aware is not None and not aware.any():
        parsed = parsed.dt.tz_localize(None)
    idx = pd.DatetimeIndex(parsed)
    naive = idx.tz_convert("UTC").tz_localize(None) if idx.tz is not None else idx
    odd = np.flatnonzero((naive < _EARLIEST) | (naive > _LATEST))
    if odd.size:
        i = int(odd[0])
        raise InputError(path, f"time {quoted(raw[i])} is outside the years 1900-2200",
                         f"pass {column.split('/')[0]} within them" if flag else "correct the row",
                         **_at(lines, i, column))
    if idx.tz is not None:
        return idx.tz_convert("UTC").tz_localize(None).as_unit("ns")
    if timezone is None or timezone == "UTC":
        return idx.as_unit("ns")
    tz = zone(timezone, path)
    return localize(idx, tz, path, column, lines)


def localize(
    idx: pd.DatetimeIndex, tz: ZoneInfo, path: str, column: str, lines: Places,
) -> pd.DatetimeIndex:
    """Local naive times in ``tz`` to naive UTC, resolving the autumn fold by order."""

    gap = pd.DatetimeIndex(idx.tz_localize(tz, ambiguous=True, nonexistent="NaT")).isna()
    if gap.any():
        i = int(np.flatnonzero(gap)[0])
        raise InputError(
            path, f"local time {idx[i]} does not exist in {tz.key} (it falls in the spring "
            "daylight-saving gap)", "a local-time export lists no value for that hour: "
            "delete the row, or pass --drop-missing if its value is blank",
            **_at(lines, i, column),
        )
    folded = pd.DatetimeIndex(idx.tz_localize(tz, ambiguous="NaT", nonexistent="NaT")).isna()
    dst = np.ones(len(idx), dtype=bool)
    if folded.any():
        seen: set[pd.Timestamp] = set()
        for k in np.flatnonzero(folded):
            dst[k] = idx[k] not in seen
            seen.add(idx[k])
    out = idx.tz_localize(tz, ambiguous=dst, nonexistent="NaT")
    return pd.DatetimeIndex(out).tz_convert("UTC").tz_localize(None).as_unit("ns")


def parse_numbers(
    table: Table, column: str, drop_missing: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Parse a numeric column; returns ``(values, keep)``.

    A blank or ``NaN`` cell raises unless ``drop_missing``, in which case ``keep`` is false
    there. ``None`` means the command has no ``--drop-missing`` (the error does not suggest
    it). Text that is not a number, and infinities, always raise.
    """
    return numbers_from_strings(table.column(column), table.lines, table.path, column,
                                drop_missing)


def numbers_from_strings(
    raw: pd.Series, lines: Places, path: str, column: str,
    drop_missing: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """As :func:`parse_numbers`, for strings with their line numbers (None for JSON)."""

    text = raw.astype(str).str.strip().reset_index(drop=True)
    missing = (text.str.lower().isin(_MISSING) | raw.isna().reset_index(drop=True)).to_numpy()
    values = pd.to_numeric(text.where(~missing, None), errors="coerce").to_numpy(dtype=float)
    garbage = np.isnan(values) & ~missing
    if garbage.any():
        i = int(np.flatnonzero(garbage)[0])
        raise InputError(path, f"{quoted(text[i])} is not a number",
                         "use a dot for decimals and no thousands separator",
                         **_at(lines, i, column))
    infinite = np.isinf(values)
    if infinite.any():
        i = int(np.flatnonzero(infinite)[0])
        raise InputError(path, f"{quoted(text[i])} is not a finite number", "correct the value",
                         **_at(lines, i, column))
    if missing.any() and not drop_missing:
        i = int(np.flatnonzero(missing)[0])
        fix = ("fill the gap in the file, or pass --drop-missing to skip such rows "
               "(the cube then reports the hole)" if drop_missing is not None
               else "fill the value in or delete the row")
        raise InputError(
            path, f"the value is missing ({quoted(text[i])}); {int(missing.sum())} row(s) lack "
            "one",
            fix, **_at(lines, i, column),
        )
    return values, ~missing


def check_order(times: pd.DatetimeIndex, lines: Places, path: str,
                column: str) -> None:
    """Raise on a duplicate or backwards timestamp (compared in UTC)."""

    if len(times) < 2:
        return
    t = times.asi8
    step = np.diff(t)
    same = np.flatnonzero(step == 0)
    back = np.flatnonzero(step < 0)
    if same.size and (not back.size or same[0] < back[0]):
        i = int(same[0]) + 1
        fix = ("delete one of the two readings" if lines is not None
               and isinstance(lines[i], str) else
               "delete one of the two rows; if the file is in local time with daylight saving "
               "(the autumn hour repeats), pass --timezone with its IANA zone instead")
        raise InputError(
            path, f"duplicate timestamp {times[i]} UTC (also {_mention(lines, i - 1, 'on ')})",
            fix, **_at(lines, i, column),
        )
    if back.size:
        i = int(back[0]) + 1
        raise InputError(
            path, f"time goes backwards: {times[i]} UTC comes after {times[i - 1]} UTC "
            f"({_mention(lines, i - 1)})", "sort the file by time", **_at(lines, i, column),
        )
    dup = pd.Index(t).duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InputError(path, f"duplicate timestamp {times[i]} UTC", "delete the repeated row",
                         **_at(lines, i, column))
