"""Forecasts of electricity price, carbon intensity and job arrivals, built to be planned on.

Every model is trained only on data before its forecast origin (rolling origin). See
:mod:`workbench.forecast.models` (the candidates; LEAR in :mod:`workbench.forecast.lear`),
:mod:`workbench.forecast.rolling`
(selection and combination by past errors, quantiles), :mod:`workbench.forecast.backtest`
(scores against stored series), :mod:`workbench.forecast.scenario` (the planner's ``model``
mode) and :mod:`workbench.forecast.arrivals` (job arrivals).

:mod:`workbench.forecast.modes` holds what a policy is told: the :class:`Forecast` record,
the modes, :func:`forecast` and the honest default mode. The default-forecast rule calls
:func:`has_history`: ``model`` where at least
:data:`MIN_HISTORY_DAYS` days of history precede the scenario, else seasonal naive.
"""

from workbench.forecast.arrivals import (
    ArrivalBacktest,
    ArrivalModel,
    backtest_arrivals,
    fit_arrivals,
    read_trace,
    trace_jobs,
)
from workbench.forecast.backtest import (
    KINDS,
    MIN_HISTORY_DAYS,
    BacktestResult,
    backtest,
    backtest_series,
    daily_origins,
    score,
    series_input,
)
from workbench.forecast.calendar import Calendar, calendar, holiday_country
from workbench.forecast.lear import LearModel, fit_lear, lear
from workbench.forecast.modes import (
    FORECAST_MODES,
    Forecast,
    default_forecast_mode,
    forecast,
)
from workbench.forecast.rolling import (
    CANDIDATES,
    COMBINATIONS,
    DEFAULT_MODEL,
    MODELS,
    QUANTILES,
    ForecastError,
    RollingForecast,
    SeriesInput,
    rolling_forecast,
)
from workbench.forecast.scenario import (
    ModelForecast,
    band_frame,
    fit_scenario,
    has_history,
    history_days,
)

__all__ = [
    "FORECAST_MODES", "Forecast", "default_forecast_mode", "forecast",
    "CANDIDATES", "COMBINATIONS", "DEFAULT_MODEL", "KINDS", "MIN_HISTORY_DAYS", "MODELS",
    "QUANTILES",
    "ArrivalBacktest", "ArrivalModel", "BacktestResult", "Calendar", "ForecastError",
    "LearModel", "ModelForecast", "RollingForecast", "SeriesInput",
    "backtest", "backtest_arrivals", "backtest_series", "band_frame", "calendar",
    "daily_origins", "fit_arrivals", "fit_lear", "fit_scenario", "has_history", "history_days",
    "holiday_country", "lear", "read_trace", "rolling_forecast", "score", "series_input",
    "trace_jobs",
]
