"""Compute-power fusion planning workbench.

Plan where, when and how AI jobs run across GPU datacenters in several grid regions so that
they follow cheap and clean electricity while still finishing on time.

The public API is every name in ``__all__``; each loads on first use, so ``import
workbench`` (and ``workbench --help``) stays quick.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    # records, store, cubes, scenarios
    "CubeError": "workbench.cubes",
    "cube_from_series": "workbench.cubes",
    "make_cube": "workbench.cubes",
    "resample": "workbench.cubes",
    "forecast": "workbench.forecast",
    "Datacenter": "workbench.model",
    "GpuPool": "workbench.model",
    "Job": "workbench.model",
    "Link": "workbench.model",
    "Scenario": "workbench.model",
    "ScenarioError": "workbench.model",
    "build_seed3": "workbench.scenarios",
    "describe": "workbench.scenarios",
    "first_hours": "workbench.scenarios",
    "Store": "workbench.store",
    "StoreError": "workbench.store",
    # the job model
    "JobProfile": "workbench.perf",
    "load_default_profiles": "workbench.perf",
    "best_batch": "workbench.perf",
    "ecu": "workbench.perf",
    "OnlineEstimator": "workbench.estimate",
    # policies and the simulator
    "POLICY_NAMES": "workbench.policies",
    "make_policy": "workbench.policies",
    "Policy": "workbench.policies.base",
    "Allocation": "workbench.policies.base",
    "Placement": "workbench.policies.base",
    "SlotState": "workbench.policies.base",
    "Forecast": "workbench.policies.base",
    "LyapunovPolicy": "workbench.policies.lyapunov",
    "OfflinePolicy": "workbench.policies.offline",
    "simulate": "workbench.sim",
    "RunResult": "workbench.sim",
    "compute_metrics": "workbench.metrics",
    # a run as an object
    "Caps": "workbench.caps",
    "RunSpec": "workbench.runner",
    "ForecastSettings": "workbench.runner",
    "SimSettings": "workbench.runner",
    "RunOutcome": "workbench.runner",
    "run_spec": "workbench.runner",
    "simulate_spec": "workbench.runner",
    "save_outcome": "workbench.runner",
    # grid events and the flexibility envelope
    "GridEvent": "workbench.events",
    "parse_event": "workbench.events",
    "Envelope": "workbench.flexibility",
    "offers": "workbench.flexibility",
    "OFFER_COLUMNS": "workbench.flexibility",
    "MemoryRecorder": "workbench.recorders",
    "CsvRecorder": "workbench.recorders",
    "DuckDBRecorder": "workbench.recorders",
    # output, quotes, sweeps
    "write_plan_csv": "workbench.io.plan_csv",
    "write_migrations_csv": "workbench.io.plan_csv",
    "quote": "workbench.quote",
    "JobSpec": "workbench.quote",
    "run_sweep": "workbench.sweep",
    "sweep_points": "workbench.sweep",
    # importers and scenario building
    "InputError": "workbench.io.errors",
    "import_grid": "workbench.io.grid",
    "import_jobs": "workbench.io.jobs",
    "build_and_save": "workbench.build",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """The package's module: ``workbench.forecast`` is the public function
    (:func:`workbench.forecast.forecast`), as it was when it loaded with the package; the
    import system's binding of the subpackage of that name, on its first import, is not
    let replace it (``from workbench.forecast import ...`` reads ``sys.modules``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "forecast" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
