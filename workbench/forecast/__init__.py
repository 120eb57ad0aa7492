"""Forecasts of electricity price, carbon intensity and job arrivals, built to be planned on.

Every model is trained only on data before its forecast origin (rolling origin). See
:mod:`workbench.forecast.models` (the candidates), :mod:`workbench.forecast.rolling`
(selection and combination by past errors, quantiles), :mod:`workbench.forecast.backtest`
(scores against stored series) and :mod:`workbench.forecast.arrivals` (job arrivals).
"""

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
from workbench.forecast.rolling import (
    CANDIDATES,
    DEFAULT_MODEL,
    MODELS,
    QUANTILES,
    ForecastError,
    RollingForecast,
    SeriesInput,
    rolling_forecast,
)

__all__ = [
    "CANDIDATES", "DEFAULT_MODEL", "KINDS", "MIN_HISTORY_DAYS", "MODELS", "QUANTILES",
    "BacktestResult", "Calendar", "ForecastError", "RollingForecast", "SeriesInput",
    "backtest", "backtest_series", "calendar", "daily_origins", "holiday_country",
    "rolling_forecast", "score", "series_input",
]
