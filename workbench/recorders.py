"""Recorders: where a simulated run goes as it happens (memory, CSV files, the DuckDB store).

A recorder gets ``start(run_meta)`` before the first slot, ``record(slot_record)`` after each
slot (a :class:`workbench.sim.SlotRecord`) and ``finish(result)`` with the
:class:`workbench.sim.RunResult`. The simulator calls them; policies never write files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pandas as pd

from workbench.io.plan_csv import (
    MIGRATION_COLUMNS,
    PLAN_COLUMNS,
    write_migrations_csv,
    write_plan_csv,
)

if TYPE_CHECKING:
    from workbench.sim import RunResult, SlotRecord

log = logging.getLogger(__name__)

__all__ = ["CsvRecorder", "DuckDBRecorder", "MemoryRecorder"]


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

    Rows are appended and flushed after every slot, so a long run leaves a readable partial
    plan behind if it is interrupted. Formats: :mod:`workbench.io.plan_csv`.

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
        self._plan: IO[str] | None = None
        self._migrations: IO[str] | None = None

    def start(self, run_meta: Mapping[str, Any]) -> None:  # noqa: ARG002
        self.close()
        self.plan_path.parent.mkdir(parents=True, exist_ok=True)
        self._plan = self.plan_path.open("w", encoding="utf-8", newline="")
        self._plan.write(",".join(PLAN_COLUMNS) + "\n")
        if self.migrations_path is not None:
            self.migrations_path.parent.mkdir(parents=True, exist_ok=True)
            self._migrations = self.migrations_path.open("w", encoding="utf-8", newline="")
            self._migrations.write(",".join(MIGRATION_COLUMNS) + "\n")

    def record(self, slot_record: SlotRecord) -> None:
        if self._plan is None:
            raise RuntimeError("CsvRecorder.record called before start")
        if slot_record.plan:
            write_plan_csv(pd.DataFrame(list(slot_record.plan)), self._plan, header=False)
            self._plan.flush()
        if self._migrations is not None and slot_record.migrations:
            write_migrations_csv(pd.DataFrame(list(slot_record.migrations)), self._migrations,
                                 header=False)
            self._migrations.flush()

    def finish(self, result: RunResult) -> None:  # noqa: ARG002
        self.close()
        log.debug("plan written to %s", self.plan_path)

    def close(self) -> None:
        for fh in (self._plan, self._migrations):
            if fh is not None:
                fh.close()
        self._plan = self._migrations = None


class DuckDBRecorder:
    """Stores the finished run in the DuckDB store (:meth:`workbench.store.Store.save_run`).

    Parameters
    ----------
    db : path
        Store file; it is opened only when the run finishes.
    run_meta : mapping, optional
        Extra fields merged into the stored run's meta (e.g. ``{"status": "baseline"}``).

    Attributes
    ----------
    run_id : str or None
        The stored run's id, once :meth:`finish` has run.
    """

    def __init__(self, db: str | Path, run_meta: Mapping[str, Any] | None = None) -> None:
        self.db = Path(db)
        self.extra = dict(run_meta or {})
        self.run_id: str | None = None

    def start(self, run_meta: Mapping[str, Any]) -> None:  # noqa: ARG002
        self.run_id = None

    def record(self, slot_record: SlotRecord) -> None:  # noqa: ARG002
        return None

    def finish(self, result: RunResult) -> None:
        from workbench.store import Store

        meta = {**result.meta, **self.extra}
        with Store(self.db) as store:
            self.run_id = store.save_run(meta, result.plan, result.migrations, result.slots,
                                         result.metrics)
        log.debug("run %s stored in %s", self.run_id, self.db)
