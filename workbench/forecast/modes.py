"""What a policy is told about future price and carbon: the :class:`Forecast` record, the
forecast modes, :func:`forecast` (one slot's forecast from the horizon's cube) and the
honest default mode of a scenario (:func:`default_forecast_mode`; the runner asks it, and
nothing else decides the mode)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr
from numpy.typing import NDArray

from workbench.cubes import price_kind
from workbench.forecast.scenario import ModelForecast, has_history

if TYPE_CHECKING:
    from workbench.model import Scenario

FORECAST_MODES = ("perfect", "tariff", "seasonal-naive", "noisy", "model")
"""What a policy can be told: the truth (a what-if), a published tariff as published, the
day before, the truth with noise, or the fitted model forecast."""


@dataclass(frozen=True)
class Forecast:
    """Price and carbon from slot ``t`` on, as the policy believes them.

    ``price_per_kwh`` and ``carbon_g_per_kwh`` have shape ``(slots, regions)``; row 0 is the
    current slot (always the true value: it is being metered now), later rows are forecasts.
    ``renewable_kw`` has shape ``(slots, sources)``: what each of the scenario's supply
    sources (:attr:`workbench.supply.Supply.sources`, in order) is believed to deliver
    (:func:`workbench.supply.forecast_output`); no columns without sources.
    ``band_miss`` names the series (``variable:region``) whose truth in the current slot lies
    outside the band the forecast was issued with (the ``model`` mode only): the forecast
    ahead was revised by it, and a planner that waits for its clock to re-plan should not.
    """

    t: int
    regions: tuple[str, ...]
    price_per_kwh: NDArray[np.float64]
    carbon_g_per_kwh: NDArray[np.float64]
    mode: str = "perfect"
    renewable_kw: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)))
    band_miss: tuple[str, ...] = ()

    def region_index(self, region: str) -> int:
        return self.regions.index(region)



def forecast(
    cube: xr.Dataset,
    t: int,
    horizon_slots: int | None = None,
    *,
    mode: str,
    error: float = 0.0,
    seed: int = 0,
    model: ModelForecast | None = None,
) -> Forecast:
    """What a scheduler at slot ``t`` believes about the slots ``t, t+1, ...``.

    Row 0 is always the true current value (it is metered now). ``mode`` has no default:
    a run's honest mode is :func:`default_forecast_mode`'s, and ``"perfect"`` is hindsight,
    only ever asked for by name. Modes:

    - ``perfect``: the true future (a what-if: nobody knows it).
    - ``tariff``: prices as published (a time-of-use tariff *is* its own exact forecast),
      carbon seasonal naive as below.
    - ``seasonal-naive``: the value one day earlier (``x[t+k-P]`` with ``P`` slots a day);
      before a day of history exists, the latest observed value ``x[t]`` (persistence).
    - ``noisy``: the truth times ``max(1 + error * eps, 0)`` with ``eps ~ N(0, 1)``, drawn
      from ``seed`` and ``t`` so that runs are repeatable; prices keep their sign (or become
      0), carbon stays >= 0.
    - ``model``: the median of the forecasts in ``model``
      (:func:`workbench.forecast.fit_scenario`, fitted once per run on the scenario's
      history), issued at the last 00:00 UTC at or before slot ``t`` from data before it,
      revised where the current slot's truth lies outside the issued band
      (:meth:`~workbench.forecast.scenario.ModelForecast.revised`; ``band_miss``).
    """
    if mode not in FORECAST_MODES:
        raise ValueError(f"unknown forecast mode {mode!r}; use one of {FORECAST_MODES}")
    if error < 0:
        raise ValueError(f"forecast error must be >= 0, got {error}")
    n = cube.sizes["time"]
    if not 0 <= t < n:
        raise ValueError(f"slot {t} is outside the cube's {n} slots")
    stop = n if horizon_slots is None else min(n, t + max(int(horizon_slots), 1))
    price = cube["price_per_kwh"].values
    carbon = cube["carbon_g_per_kwh"].values
    p = price[t:stop].copy()
    c = carbon[t:stop].copy()
    miss: list[str] = []
    if mode in ("seasonal-naive", "tariff"):
        period = int(round(86400 / int(cube.attrs["slot_s"])))
        # x[t + k - P * ceil(k / P)], or x[t] before a day of history (all k at once).
        k = np.arange(1, stop - t)
        src = t + k - period * np.ceil(k / period).astype(np.int64)
        rows = np.where(src >= 0, src, t)
        if mode == "seasonal-naive":
            p[1:] = price[rows]
        c[1:] = carbon[rows]
    elif mode == "model":
        if model is None:
            raise ValueError("forecast mode 'model' needs the fitted forecasts: pass "
                             "model=workbench.forecast.fit_scenario(scenario)")
        if stop - t > 1:
            times = pd.DatetimeIndex(cube["time"].values[t:stop])
            regions = [str(r) for r in cube["region"].values]
            cols = [model.regions.index(r) for r in regions]
            slot_s = int(cube.attrs["slot_s"])
            for var, arr in (("price_per_kwh", p), ("carbon_g_per_kwh", c)):
                now = np.full(len(model.regions), np.nan)
                now[cols] = arr[0]
                path, out = model.revised(times, var, now, slot_s=slot_s)
                arr[1:] = path[1:, cols]
                miss += [f"{var}:{r}" for r, col in zip(regions, cols, strict=True)
                         if out[col]]
    elif mode == "noisy" and error > 0 and stop - t > 1:
        rng = np.random.default_rng([seed, t])
        # The factor is clipped at 0 so that a large error never flips a price's sign.
        p[1:] *= np.maximum(1.0 + error * rng.standard_normal(p[1:].shape), 0.0)
        c[1:] *= np.maximum(1.0 + error * rng.standard_normal(c[1:].shape), 0.0)
    return Forecast(
        t=t,
        regions=tuple(str(r) for r in cube["region"].values),
        price_per_kwh=p,
        carbon_g_per_kwh=c,
        mode=mode,
        band_miss=tuple(miss),
    )


def default_forecast_mode(scenario: Scenario) -> str:
    """The honest forecast a run uses unless told otherwise.

    ``"tariff"`` where the prices are a published tariff (:func:`price_kind`): the
    operator knows them, and forecasts carbon seasonal naive. For market prices,
    ``"model"`` (:mod:`workbench.forecast`, backtested price and carbon models) where at
    least :data:`workbench.forecast.MIN_HISTORY_DAYS` days of history precede the
    scenario, else ``"seasonal-naive"`` (yesterday's prices and carbon stand for today's).
    ``"perfect"`` is only ever an explicit what-if. The run records which
    (``RunResult.meta["forecast_mode"]``).
    """
    if price_kind(scenario.grid) == "tariff":
        return "tariff"
    return "model" if has_history(scenario) else "seasonal-naive"
