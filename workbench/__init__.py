"""Compute-power fusion planning workbench.

Plan where, when and how AI jobs run across GPU datacenters in several grid regions so that
they follow cheap and clean electricity while still finishing on time.

The public API is every name in ``__all__``. The light ones (records, store, cubes,
scenarios) load with the package; the rest (simulator, policies, sweeps, importers, the job
model's fitting) load on first use, so ``import workbench`` stays quick.
"""

from __future__ import annotations

import importlib
from typing import Any

from workbench.cubes import CubeError, cube_from_series, make_cube, resample
from workbench.forecast import forecast
from workbench.model import (
    Datacenter,
    GpuPool,
    Job,
    Link,
    Scenario,
    ScenarioError,
)
from workbench.scenarios import build_seed3, describe, first_hours
from workbench.store import Store, StoreError

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
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

__all__ = [
    "CubeError",
    "Datacenter",
    "GpuPool",
    "Job",
    "Link",
    "Scenario",
    "ScenarioError",
    "Store",
    "StoreError",
    "build_seed3",
    "cube_from_series",
    "describe",
    "first_hours",
    "forecast",
    "make_cube",
    "resample",
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
