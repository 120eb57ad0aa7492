"""Recorders: where a simulated run goes as it happens (memory, CSV files, the DuckDB store).

A recorder gets ``start(run_meta)`` before the first slot, ``record(slot_record)`` after each
slot (a :class:`workbench.sim.SlotRecord`) and ``finish(result)`` with the
:class:`workbench.sim.RunResult`. The simulator calls them; policies never write files.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from workbench.io.plan_csv import (
    MIGRATION_COLUMNS,
    PLAN_COLUMNS,
    AtomicFile,
    write_migrations_csv,
    write_plan_csv,
)

if TYPE_CHECKING:
    from workbench.sim import RunResult, SlotRecord

log = logging.getLogger(__name__)

__all__ = ["CsvRecorder", "DuckDBRecorder", "MemoryRecorder", "SavedRuns", "save_results"]


class MemoryRecorder:
    """Keeps everything in memory: ``meta``, ``records`` (one per slot) and ``result``."""

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.records: list[SlotRecord] = []
        self.result: RunResult | None = None

    def start(self, run_meta: Mapping[str, Any]) -> None:
        self.meta = dict(run_meta)
        self.records = []
        self.result = None

    def record(self, slot_record: SlotRecord) -> None:
        self.records.append(slot_record)

    def finish(self, result: RunResult) -> None:
        self.result = result

    def plan(self) -> pd.DataFrame:
        """The plan rows recorded so far (the same rows as ``RunResult.plan``)."""
        return pd.DataFrame([row for rec in self.records for row in rec.plan])


class CsvRecorder:
    """Streams the plan (and optionally the migrations) to CSV files slot by slot.

    Rows go to a temporary file next to each target (``.<name>.<random>.partial``) as the
    run goes and the file is renamed onto the target when the run finishes, so an
    interrupted run never leaves a partial plan that looks complete under the target's name
    (the partial file stays behind for inspection). Formats: :mod:`workbench.io.plan_csv`.

    Parameters
    ----------
    plan_path : path
        Plan CSV to (over)write.
    migrations_path : path, optional
        Migrations CSV to (over)write.
    """

    def __init__(self, plan_path: str | Path, migrations_path: str | Path | None = None) -> None:
        self.plan_path = Path(plan_path)
        self.migrations_path = None if migrations_path is None else Path(migrations_path)
        self._plan: AtomicFile | None = None
        self._migrations: AtomicFile | None = None

    def start(self, run_meta: Mapping[str, Any]) -> None:  # noqa: ARG002
        self.abort()
        self._plan = AtomicFile(self.plan_path)
        self._plan.file.write(",".join(PLAN_COLUMNS) + "\n")
        if self.migrations_path is not None:
            self._migrations = AtomicFile(self.migrations_path)
            self._migrations.file.write(",".join(MIGRATION_COLUMNS) + "\n")

    def record(self, slot_record: SlotRecord) -> None:
        if self._plan is None:
            raise RuntimeError("CsvRecorder.record called before start")
        if slot_record.n_rows:
            write_plan_csv(slot_record.plan_frame(), self._plan.file, header=False)
        if self._migrations is not None and slot_record.migrations:
            write_migrations_csv(pd.DataFrame(list(slot_record.migrations)),
                                 self._migrations.file, header=False)

    def finish(self, result: RunResult) -> None:  # noqa: ARG002
        for out in (self._plan, self._migrations):
            if out is not None:
                out.commit()
        self._plan = self._migrations = None
        log.debug("plan written to %s", self.plan_path)

    def abort(self) -> None:
        """Drop the temporary files of an unfinished run; the targets stay as they were."""
        for out in (self._plan, self._migrations):
            if out is not None:
                out.abort()
        self._plan = self._migrations = None

    close = abort


LOCK_WAIT_S = 60.0
"""How long :func:`save_results` retries a locked store before writing a side file, s."""


@dataclass(frozen=True)
class SavedRuns:
    """Where :func:`save_results` put the runs: ``path`` is the store, or a side file
    (``side_file`` true) when the store stayed locked; ``waited_s`` the time spent retrying."""

    run_ids: tuple[str, ...]
    path: Path
    side_file: bool
    waited_s: float


def save_results(
    db: str | Path,
    results: Sequence[tuple[RunResult, Mapping[str, Any]]],
    wait_s: float = LOCK_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> SavedRuns:
    """Store finished runs in ``db`` in one transaction (all or none).

    Each entry is a result and extra meta merged into its stored meta (e.g.
    ``{"status": "baseline"}``). While another process holds the store's lock, retry with
    back-off (0.25 s doubling to 8 s) for up to ``wait_s`` seconds; then write the runs to a
    new store file beside it, ``<db stem>.runs-<UTC time>.duckdb``, so the work is not lost
    (``workbench import runs FILE`` copies them in later).
    """
    from workbench.store import Store, StoreLockedError

    runs = [({**r.meta, **extra}, r.plan, r.migrations, r.slots, r.metrics)
            for r, extra in results]
    t0 = clock()
    delay = 0.25
    while True:
        try:
            with Store(db) as store:
                ids = store.save_runs(runs)
            return SavedRuns(tuple(ids), Path(db), False, clock() - t0)
        except StoreLockedError:
            waited = clock() - t0
            if waited >= wait_s:
                break
            log.info("store %s is locked; retrying in %.2g s", db, delay)
            sleep(min(delay, max(wait_s - waited, 0.0)))
            delay = min(2 * delay, 8.0)
    waited = clock() - t0
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    side = Path(db).with_name(f"{Path(db).stem}.runs-{stamp}.duckdb")
    with Store(side) as store:
        ids = store.save_runs(runs)
    log.warning("store %s stayed locked for %.0f s; %d run(s) saved to %s", db, waited,
                len(ids), side)
    return SavedRuns(tuple(ids), side, True, waited)


class DuckDBRecorder:
    """Stores the finished run in the DuckDB store (:func:`save_results`: one transaction,
    a bounded wait on a locked store, then a side file).

    Parameters
    ----------
    db : path
        Store file; it is opened only when the run finishes.
    run_meta : mapping, optional
        Extra fields merged into the stored run's meta (e.g. ``{"status": "baseline"}``).
    wait_s : float
        How long to retry a locked store, s.

    Attributes
    ----------
    run_id : str or None
        The stored run's id, once :meth:`finish` has run.
    saved : SavedRuns or None
        Where it went (the store or a side file).
    """

    def __init__(self, db: str | Path, run_meta: Mapping[str, Any] | None = None,
                 wait_s: float = LOCK_WAIT_S) -> None:
        self.db = Path(db)
        self.extra = dict(run_meta or {})
        self.wait_s = wait_s
        self.run_id: str | None = None
        self.saved: SavedRuns | None = None

    def start(self, run_meta: Mapping[str, Any]) -> None:  # noqa: ARG002
        self.run_id = None
        self.saved = None

    def record(self, slot_record: SlotRecord) -> None:  # noqa: ARG002
        return None

    def finish(self, result: RunResult) -> None:
        self.saved = save_results(self.db, [(result, self.extra)], self.wait_s)
        self.run_id = self.saved.run_ids[0]
        log.debug("run %s stored in %s", self.run_id, self.saved.path)
