"""Every name the package promises in ``__all__`` resolves."""

from __future__ import annotations

import workbench
from workbench.forecast import default_forecast_mode


def test_every_public_name_resolves() -> None:
    missing = [n for n in workbench.__all__ if getattr(workbench, n, None) is None]
    assert missing == []


def test_seed3_plans_through_the_public_api() -> None:
    import dataclasses

    sc = workbench.build_seed3()
    day = dataclasses.replace(
        sc, n_slots=96,
        jobs=tuple(j for j in sc.jobs if j.is_training and j.deadline <= sc.start
                   + (sc.end - sc.start) / 7),
    )
    result = workbench.simulate(day, workbench.make_policy("lyapunov"),
                                forecast_mode=default_forecast_mode(day))
    assert set(workbench.compute_metrics(result, day)) >= {"cost", "carbon_kg", "energy_kwh"}
