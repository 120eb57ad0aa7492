"""What the sessions of one app server share: read-only data loaded or computed once.

A :class:`SharedCache` holds the scenarios as loaded from a store, the comparison runs of a
scenario (:class:`Comparison`, under a :class:`ComparisonKey`) and stored runs as loaded.
Scenarios and comparisons are keyed by :meth:`workbench.store.Store.scenario_fingerprint` (a
hash of every stored row the scenario is built from), so a re-import is never served stale;
a stored run does not change, so it is keyed by its id. Every method is thread-safe: runs
go in worker threads.

One cache serves a server process (:data:`SERVER_CACHE`, what :class:`WorkbenchState` uses
unless it is given another); a test or a notebook passes its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import pandas as pd

from workbench import scenarios
from workbench.caps import Caps
from workbench.forecast import DEFAULT_MODEL
from workbench.power_limits import DEFAULT_MENU

if TYPE_CHECKING:
    from workbench.model import Scenario
    from workbench.sim import RunResult
    from workbench.store import Store


@dataclass(frozen=True)
class ComparisonKey:
    """What a comparison run of a scenario depends on: the store file, the scenario as
    stored (its name and fingerprint), the slot grid it was planned on, the forecast (mode,
    error and forecaster), the GPU power-limit menu and the power caps it is metered against
    (a run is compared only with runs under its own caps and levers)."""

    db_path: str
    scenario: str
    fingerprint: str
    slot_s: int
    n_slots: int
    forecast_mode: str | None
    forecast_error: float
    metered: Caps = field(default_factory=Caps)
    forecast_model: str = DEFAULT_MODEL
    power_limits: tuple[float, ...] = DEFAULT_MENU


@dataclass(frozen=True)
class Comparison:
    """A comparison (baseline) run as every session sees it.

    ``metrics`` its metrics; ``plan`` its plan rows (a saving against it is attributed
    from them); ``bound`` the hindsight bound its policy reported (the offline plan's), else
    None; ``run_id`` its id in the store, None while it is not stored.
    """

    metrics: Mapping[str, Any]
    plan: pd.DataFrame
    bound: Mapping[str, Any] | None = None
    run_id: str | None = None


class SharedCache:
    """Scenarios, comparison runs and stored runs, loaded once and shared read-only by the
    sessions of a server (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scenarios: dict[tuple[str, str, str], Scenario] = {}
        self._comparisons: dict[tuple[ComparisonKey, str], Comparison] = {}
        self._runs: dict[tuple[str, str, str], RunResult] = {}

    # -- scenarios ---------------------------------------------------------------------
    def scenario(self, db_path: str, name: str, store: Store) -> tuple[Scenario, str]:
        """The scenario ``name`` of the open ``store`` (file ``db_path``; a built-in one the
        store lacks is generated in memory, never written:
        :func:`workbench.scenarios.stored_or_builtin`) and its fingerprint (``""`` for an
        unstored built-in), loaded once while the stored rows are the same."""
        fingerprint = store.scenario_fingerprint(name)
        key = (db_path, name, fingerprint)
        with self._lock:
            cached = self._scenarios.get(key)
        if cached is None:
            cached = scenarios.stored_or_builtin(store, name)
            with self._lock:
                cached = self._scenarios.setdefault(key, cached)
        return cached, fingerprint

    # -- comparison runs -----------------------------------------------------------------
    def comparisons(self, key: ComparisonKey, policies: Iterable[str]
                    ) -> dict[str, Comparison]:
        """The comparison runs of ``policies`` kept under ``key`` (those not run yet are
        absent)."""
        with self._lock:
            return {p: self._comparisons[(key, p)] for p in policies
                    if (key, p) in self._comparisons}

    def keep_comparison(self, key: ComparisonKey, policy: str, comparison: Comparison) -> None:
        """Keep ``policy``'s comparison run for every session (a later one replaces it)."""
        with self._lock:
            self._comparisons[(key, policy)] = comparison

    # -- stored runs ---------------------------------------------------------------------
    def stored_run(self, db_path: str, run_id: str, fingerprint: str) -> RunResult | None:
        """Stored run ``run_id`` as loaded against the scenario of ``fingerprint``, if kept."""
        with self._lock:
            return self._runs.get((db_path, run_id, fingerprint))

    def keep_stored_run(self, db_path: str, run_id: str, fingerprint: str,
                        result: RunResult) -> None:
        """Keep a stored run as loaded (read-only: every session gets the same object)."""
        with self._lock:
            self._runs[(db_path, run_id, fingerprint)] = result

    def forget_runs(self, db_path: str, run_ids: Iterable[str]) -> None:
        """Drop deleted runs of ``db_path``."""
        gone = set(run_ids)
        with self._lock:
            for key in [k for k in self._runs if k[0] == db_path and k[1] in gone]:
                del self._runs[key]


SERVER_CACHE: Final = SharedCache()
"""The cache of this process: every session of a server (``workbench serve``, ``panel serve
apps/workbench.py``) uses it."""
