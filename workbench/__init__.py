"""Compute-power fusion planning workbench.

Plan where, when and how AI jobs run across GPU datacenters in several grid regions so that
they follow cheap and clean electricity while still finishing on time.
"""

from workbench.cubes import CubeError, cube_from_series, forecast, make_cube, resample
from workbench.model import (
    Datacenter,
    GpuPool,
    Job,
    Link,
    Scenario,
    ScenarioError,
)
from workbench.scenarios import build_seed3, describe
from workbench.store import Store, StoreError

__version__ = "0.1.0"

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
    "forecast",
    "make_cube",
    "resample",
]
