"""The DuckDB store: one file holding scenarios, grid series, profiles, runs and plans.

Every query of the workbench lives in this package, one module per group of tables:

- :mod:`~workbench.store.scenarios`: ``scenarios``, ``datacenters``, ``gpu_pools``,
  ``links`` (and a scenario's jobs, grid and profiles);
- :mod:`~workbench.store.grid`: ``grid_series`` (long format, one row per region and UTC
  time);
- :mod:`~workbench.store.jobs`: ``jobs`` (job sets and scenarios' jobs);
- :mod:`~workbench.store.profiles`: ``profiles`` (performance profiles);
- :mod:`~workbench.store.compute`: ``gpu_profile_runs`` / ``gpu_profile_samples`` (NVML
  sessions), ``devices``, ``compute_measurements``;
- :mod:`~workbench.store.runs`: ``runs``, ``plan_rows``, ``migrations``, ``slot_rows``,
  ``run_metrics``;
- :mod:`~workbench.store.schema`: every table's columns (from :mod:`workbench.schema`),
  the schema version and the migrations;
- :mod:`~workbench.store.files`, :mod:`~workbench.store.errors`, :mod:`~workbench.store.base`:
  checking and opening a file, transactions, and telling a locked, unreadable, read-only,
  full or damaged store apart.

The schema is versioned in a ``schema_version`` table. Opening a file written by a newer
workbench (or by something else) raises :class:`StoreError`; an older version is migrated in
one transaction (read-only: read as the current schema without writing). Every write runs in
a transaction, so a failed write leaves the file as it was. Importers hand the store frames
or records; nothing outside this package runs SQL on it.
"""

from __future__ import annotations

from workbench.store.compute import ComputeTables
from workbench.store.errors import StoreError, StoreLockedError
from workbench.store.grid import GRID_ONE_THREAD_ROWS
from workbench.store.runs import (
    RUN_SETTINGS,
    RUN_SUMMARY_METRICS,
    RunTables,
    check_side_file,
)
from workbench.store.scenarios import ScenarioTables, grid_frame
from workbench.store.schema import SCHEMA_VERSION

__all__ = [
    "GRID_ONE_THREAD_ROWS",
    "RUN_SETTINGS",
    "RUN_SUMMARY_METRICS",
    "SCHEMA_VERSION",
    "Store",
    "StoreError",
    "StoreLockedError",
    "check_side_file",
    "grid_frame",
]


class Store(ScenarioTables, RunTables, ComputeTables):
    """A DuckDB file holding the workbench's data: ``Store(path, read_only=False)``, its
    parameters those of :class:`~workbench.store.base.StoreBase` (``":memory:"`` gives a
    throw-away store; commands that only read open it ``read_only``).

    Use as a context manager, or call :meth:`close`. The methods are those of the table
    modules: scenarios, grid series, jobs, profiles, measurements and runs.
    """
