"""Plan and migrations CSV files: the exported schedule, one row per job per slot.

Both formats are documented for operators in the README ("Plan and migrations CSV").
Times are ISO-8601 in UTC with a ``Z`` suffix (``2024-07-01T08:15:00Z``); ``region`` is the
*datacenter* name (e.g. ``guangzhou``), not the grid zone. Numbers are written to
:data:`FLOAT_DIGITS` significant digits: float noise such as ``0.1 + 0.08 =
0.18000000000000002`` is written ``0.18``, and :func:`read_plan_csv` returns each value to
within one part in 10^15 of what :func:`write_plan_csv` was given.
Text cells that a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``, tab, CR)
are written with a leading ``'`` (OWASP's CSV-injection advice) and restored on reading;
files are written under a temporary name and renamed into place.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from workbench.io.errors import output_error
from workbench.schema import ACTIONS, JOBS_CSV, MIGRATION, PLAN_ROW, SITE_SLOT, site_key

PLAN_COLUMNS: tuple[str, ...] = PLAN_ROW.csv_names
"""Plan CSV columns, in file order (the ``csv`` fields of :data:`workbench.schema.PLAN_ROW`).
``transfer_gb``: data moved into the datacenter for this row (dataset and/or checkpoint);
``lost_s``: seconds of the slot lost to restart and transfer."""

MIGRATION_COLUMNS: tuple[str, ...] = MIGRATION.csv_names
"""Migrations CSV columns, in file order (:data:`workbench.schema.MIGRATION`): one row per
data movement between datacenters (``moved``: ``dataset``, ``checkpoint`` or
``dataset+checkpoint``), a first run away from home included."""

PLAN_LATER_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in PLAN_ROW.fields if f.csv and (f.since or 0) >= 7)
"""Plan CSV columns added with store schema 7 (power limit, supply split): a plan of a run
stored before lacks them, and they are written empty."""

_PLAN_TIMES = PLAN_ROW.names_of("time", PLAN_COLUMNS)
_PLAN_INTS = PLAN_ROW.names_of("int", PLAN_COLUMNS)
_PLAN_FLOATS = PLAN_ROW.names_of("float", PLAN_COLUMNS)
_PLAN_TEXT = PLAN_ROW.names_of("text", PLAN_COLUMNS)
_MIG_FLOATS = MIGRATION.names_of("float", MIGRATION_COLUMNS)
_MIG_TEXT = MIGRATION.names_of("text", MIGRATION_COLUMNS)

_ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class PlanCsvError(ValueError):
    """A plan or migrations table does not follow the CSV schema; the message says how."""


def _utc(values: pd.Series, column: str) -> pd.Series:
    try:
        out = pd.to_datetime(values, utc=True)
    except (ValueError, TypeError) as exc:
        raise PlanCsvError(f"column {column!r} holds a value that is not a time: {exc}") from exc
    if out.isna().any():
        row = int(np.flatnonzero(out.isna().to_numpy())[0])
        raise PlanCsvError(f"column {column!r} is empty in row {row}; every row needs a time")
    return out


def _check_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise PlanCsvError(
            f"{what} lacks the columns {missing}; expected {list(columns)} in this order"
        )


def normalise_plan(plan: pd.DataFrame) -> pd.DataFrame:
    """The plan's CSV columns only, in order, with the schema's types.

    Times become timezone-aware UTC timestamps, ``n_gpus`` and ``batch_size`` integers
    (0 when the job does not run), ``gpu_type`` an empty string when it does not run.
    Raises :class:`PlanCsvError` on a missing column or an unknown action.
    """
    _check_columns(plan, [c for c in PLAN_COLUMNS if c not in PLAN_LATER_COLUMNS], "plan")
    plan = plan.assign(**{c: np.nan for c in PLAN_LATER_COLUMNS if c not in plan.columns})
    out = plan.loc[:, list(PLAN_COLUMNS)].copy()
    for col in _PLAN_TIMES:
        out[col] = _utc(out[col], col)
    for col in _PLAN_INTS:
        out[col] = pd.to_numeric(out[col]).fillna(0).astype(np.int64)
    for col in _PLAN_FLOATS:
        out[col] = pd.to_numeric(out[col]).astype(float)
    for col in _PLAN_TEXT:
        out[col] = out[col].fillna("").astype(str)
    bad = sorted(set(out["action"]) - set(ACTIONS))
    if bad:
        raise PlanCsvError(f"unknown plan actions {bad}; allowed: {list(ACTIONS)}")
    return out.reset_index(drop=True)


def normalise_migrations(migrations: pd.DataFrame) -> pd.DataFrame:
    """The migrations table's CSV columns only, in order, with the schema's types."""
    _check_columns(migrations, MIGRATION_COLUMNS, "migrations table")
    out = migrations.loc[:, list(MIGRATION_COLUMNS)].copy()
    for col in MIGRATION.names_of("time", MIGRATION_COLUMNS):
        out[col] = _utc(out[col], col)
    for col in _MIG_FLOATS:
        out[col] = pd.to_numeric(out[col]).astype(float)
    for col in _MIG_TEXT:
        out[col] = out[col].fillna("").astype(str)
    return out.reset_index(drop=True)


FORMULA_PREFIXES: tuple[str, ...] = ("=", "+", "-", "@", "\t", "\r")
"""Leading characters that make a spreadsheet read a cell as a formula (OWASP CSV injection)."""

_QUOTE = "'"


def neutralise_cell(text: str) -> str:
    """A text cell safe to open in a spreadsheet: ``'`` before a formula prefix.

    Cells starting with ``=``, ``+``, ``-``, ``@``, tab or carriage return (and, so that
    :func:`restore_cell` inverts this exactly, cells already starting with ``'``) get a
    leading ``'``; every other cell is unchanged.
    """
    return _QUOTE + text if text.startswith((*FORMULA_PREFIXES, _QUOTE)) else text


def restore_cell(text: str) -> str:
    """Invert :func:`neutralise_cell`: drop one leading ``'``."""
    return text[1:] if text.startswith(_QUOTE) else text


def _mode_for(path: Path) -> int:
    """Permission bits for a new version of ``path``: its current ones, else 0666 & ~umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)  # read the umask (set it back at once)
        os.umask(mask)
        return 0o666 & ~mask


class _TargetFile(io.TextIOWrapper):
    """The temporary file of an :class:`AtomicFile`: a write that fails (a full disk)
    raises the :class:`~workbench.io.errors.OutputError` of the file it stands for."""

    def __init__(self, fd: int, target: Path) -> None:
        super().__init__(os.fdopen(fd, "wb"), encoding="utf-8", newline="")
        self.target = target

    def write(self, s: str) -> int:
        try:
            return super().write(s)
        except OSError as exc:
            raise output_error(exc, self.target) from None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise output_error(exc, self.target) from None


class AtomicFile:
    """A text file written under a temporary name in the target's folder and renamed onto
    the target by :meth:`commit` (``os.replace``: readers see the old file or the whole new
    one, never a part). :meth:`abort` removes the temporary file; a killed process leaves
    it behind as ``.<name>.<random>.partial`` and the target untouched. A write that fails
    (a full disk, a read-only place) raises :class:`~workbench.io.errors.OutputError`
    naming the target."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".partial",
                                       dir=self.path.parent)
        except OSError as exc:
            raise output_error(exc, self.path) from None
        self.tmp = Path(tmp)
        self.file: IO[str] = _TargetFile(fd, self.path)

    def commit(self) -> None:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            # mkstemp makes the file 0600; give it the mode a plain open() would have (the
            # target's own when it exists, else 0666 less the umask), not owner-only.
            os.chmod(self.tmp, _mode_for(self.path))
            self.file.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.abort()
            raise output_error(exc, self.path) from None

    def abort(self) -> None:
        """Remove the temporary file (also when closing it fails: the disk is full and its
        buffered rows cannot be flushed)."""
        if not self.file.closed:
            try:
                self.file.close()
            except OSError:
                pass  # the file is closed even so; its unwritten rows are dropped
        self.tmp.unlink(missing_ok=True)


@contextmanager
def atomic_write(path: str | Path) -> Iterator[IO[str]]:
    """Open ``path`` for writing text atomically: renamed into place when the block ends,
    removed (and ``path`` left as it was) when it raises."""
    out = AtomicFile(path)
    try:
        yield out.file
    except BaseException:
        out.abort()
        raise
    out.commit()


FLOAT_DIGITS = 15
"""Significant digits of a float in every CSV the workbench writes: the most a float64 keeps
through a decimal round trip (``DBL_DIG``), so a value computed with noise in its last bits
(``0.18000000000000002``) is written as the decimal it stands for (``0.18``). Integers are
written as integers."""


def float_text(value: float) -> str:
    """A float as a CSV writes it: the shortest text that reads back as ``value`` rounded to
    :data:`FLOAT_DIGITS` significant digits (``0.18000000000000002`` -> ``0.18``, ``2.0`` ->
    ``2.0``)."""
    return repr(float(f"{value:.{FLOAT_DIGITS}g}"))


def write_csv(frame: pd.DataFrame, dest: str | Path | IO[str], *, header: bool = True) -> None:
    """The one CSV writer of the workbench's exports.

    Timezone-aware times become ISO-8601 UTC (``...Z``); text cells are neutralised
    (:func:`neutralise_cell`), floats written to :data:`FLOAT_DIGITS` significant digits,
    integer columns (nullable ones too) as integers; a path is written atomically
    (:func:`atomic_write`), an open file is appended to.
    """
    text = frame.copy()
    carriage_return = False
    for col in text.columns:
        if isinstance(text[col].dtype, pd.CategoricalDtype):
            text[col] = text[col].astype(object)  # its labels are text cells too
        if isinstance(text[col].dtype, pd.DatetimeTZDtype):
            text[col] = text[col].dt.strftime(_ISO_FORMAT)
        elif text[col].dtype == object or isinstance(text[col].dtype, pd.StringDtype):
            text[col] = text[col].map(lambda v: neutralise_cell(v) if isinstance(v, str) else v)
            carriage_return = carriage_return or bool(
                text[col].map(lambda v: isinstance(v, str) and "\r" in v).any())
    # The csv writer quotes only the characters of the line terminator: a name holding a
    # carriage return is written with CRLF row ends so that the CR is quoted (CSV readers
    # accept mixed row ends).
    end = "\r\n" if carriage_return else "\n"
    opts = {"index": False, "header": header, "lineterminator": end,
            "float_format": float_text}
    if isinstance(dest, (str, Path)):
        with atomic_write(dest) as fh:
            text.to_csv(fh, **opts)
    else:
        text.to_csv(dest, **opts)


def write_plan_csv(
    plan: pd.DataFrame, dest: str | Path | IO[str], *, header: bool = True
) -> None:
    """Write the plan CSV (columns :data:`PLAN_COLUMNS`) to a path or an open text file.

    Extra columns of ``plan`` (e.g. ``slot``, ``grid_region``) are left out. With
    ``header=False`` rows are appended without the header line (streaming writers).
    """
    write_csv(normalise_plan(plan), dest, header=header)


def write_migrations_csv(
    migrations: pd.DataFrame, dest: str | Path | IO[str], *, header: bool = True
) -> None:
    """Write the migrations CSV (columns :data:`MIGRATION_COLUMNS`)."""
    write_csv(normalise_migrations(migrations), dest, header=header)


def _read(path: str | Path | IO[str], columns: Sequence[str], what: str,
          text: Sequence[str]) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if tuple(frame.columns) != tuple(columns):
        raise PlanCsvError(
            f"{what} header is {list(frame.columns)}; expected exactly {list(columns)}"
        )
    for col in text:
        frame[col] = frame[col].map(restore_cell)
    return frame


def _numbers(frame: pd.DataFrame, columns: Sequence[str], kind: type) -> None:
    for col in columns:
        raw = frame[col].replace("", np.nan)
        try:
            values = pd.to_numeric(raw)
        except (ValueError, TypeError) as exc:
            raise PlanCsvError(f"column {col!r} holds a value that is not a number: {exc}") from exc
        frame[col] = values.fillna(0).astype(np.int64) if kind is int else values.astype(float)


def read_plan_csv(path: str | Path | IO[str]) -> pd.DataFrame:
    """Read a plan CSV back into a frame with the schema's types (see :func:`normalise_plan`)."""
    frame = _read(path, PLAN_COLUMNS, "plan CSV", _PLAN_TEXT)
    _numbers(frame, _PLAN_INTS, int)
    _numbers(frame, _PLAN_FLOATS, float)
    return normalise_plan(frame)


def read_migrations_csv(path: str | Path | IO[str]) -> pd.DataFrame:
    """Read a migrations CSV back into a frame with the schema's types."""
    frame = _read(path, MIGRATION_COLUMNS, "migrations CSV", _MIG_TEXT)
    _numbers(frame, _MIG_FLOATS, float)
    return normalise_migrations(frame)


JOBS_COLUMNS: tuple[str, ...] = JOBS_CSV.csv_names
"""Jobs CSV columns (``workbench plan --jobs-out``, :data:`workbench.schema.JOBS_CSV`): one
row per job. ``finish`` is when a training job finished (empty if it did not; an inference
service: empty); ``missed`` is ``true`` when it missed its deadline (finished late, or not
done by a deadline inside the horizon); ``transfer_gb`` all data moved for it, ``lost_s``
seconds lost to restarts and transfers, ``migrations`` moves of its checkpoint."""


def jobs_table(jobs: pd.DataFrame) -> pd.DataFrame:
    """The jobs CSV columns (:data:`JOBS_COLUMNS`) from a run's jobs frame
    (:attr:`workbench.sim.RunResult.jobs`)."""
    out = pd.DataFrame({
        "job_id": jobs["job_id"].astype(str), "kind": jobs["kind"].astype(str),
        "home": jobs["home"].astype(str),
        "arrival": pd.to_datetime(jobs["arrival"], utc=True),
        "deadline": pd.to_datetime(jobs["deadline"], utc=True),
        "first_start": pd.to_datetime(jobs["first_start"], utc=True),
        "finish": pd.to_datetime(jobs["finish_time"], utc=True),
        "missed": [isinstance(v, bool | np.bool_) and not bool(v)
                   for v in jobs["deadline_met"]],
        "energy_kwh": jobs["energy_kwh"].astype(float), "cost": jobs["cost"].astype(float),
        "carbon_kg": jobs["carbon_kg"].astype(float),
        "transfer_gb": jobs["transfer_gb"].astype(float), "lost_s": jobs["lost_s"].astype(float),
        "migrations": jobs["migrations"].astype(int),
    })
    return out.loc[:, list(JOBS_COLUMNS)]


def write_jobs_csv(jobs: pd.DataFrame, dest: str | Path | IO[str]) -> None:
    """Write the jobs CSV (:data:`JOBS_COLUMNS`); times ISO-8601 UTC, empty when absent."""
    frame = jobs_table(jobs)
    frame["missed"] = frame["missed"].map({True: "true", False: "false"})
    write_csv(frame, dest)


SITES_COLUMNS: tuple[str, ...] = SITE_SLOT.csv_names
"""Columns of the sites CSV (``plan --sites-out``, ``runs export --sites-out``)."""


def sites_table(slots: pd.DataFrame, datacenters: Sequence[str]) -> pd.DataFrame:
    """The sites CSV's rows (:data:`SITES_COLUMNS`): one per datacenter and slot, from a
    slots frame holding the site meter's columns (:func:`workbench.bill.has_meter`), slot
    by slot, datacenters in the scenario's order."""
    times = pd.DatetimeIndex(pd.to_datetime(slots["time"], utc=True))
    parts = []
    for d in datacenters:
        part = {"slot_start": times, "datacenter": np.full(len(slots), d, dtype=object)}
        for name in SITES_COLUMNS[2:]:
            part[name] = slots[site_key(name, d)].to_numpy(dtype=float)
        parts.append(pd.DataFrame(part))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=list(SITES_COLUMNS))
    order = np.lexsort((np.repeat(np.arange(len(datacenters)), len(slots)),
                        np.tile(np.arange(len(slots)), len(datacenters))))
    return frame.iloc[order].reset_index(drop=True)


def write_sites_csv(slots: pd.DataFrame, datacenters: Sequence[str],
                    dest: str | Path | IO[str]) -> None:
    """Write the sites CSV (:data:`SITES_COLUMNS`, :func:`sites_table`)."""
    write_csv(sites_table(slots, datacenters), dest)
