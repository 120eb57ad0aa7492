"""Calendar features of the hours a forecast targets: local hour, weekday, public holiday.

The calendar is known in advance, so these features never leak the future. Holidays come
from the ``holidays`` package for the country a region code starts with (``DE-LU`` -> DE,
``US-CAL-CISO`` -> US, ``JP-TK`` -> JP); a region the package does not know gets no holiday
feature (all zeros), which is logged, not an error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)


def holiday_country(region: str) -> str | None:
    """The ISO country code a region or grid-zone name starts with, if ``holidays`` knows it."""
    import holidays

    code = region.split("-")[0].upper()
    if len(code) != 2 or code not in holidays.list_supported_countries():
        return None
    return code


@dataclass(frozen=True)
class Calendar:
    """Calendar features of an hourly UTC index, in the region's local time.

    Attributes
    ----------
    hour_local, weekday_local : ndarray of int
        Local hour 0..23 and weekday 0 (Monday)..6 of each hour start.
    holiday : ndarray of float
        1.0 on the region's public holidays (local date), else 0.0.
    country : str or None
        The country whose holidays are used (None: no holiday feature).
    """

    hour_local: np.ndarray
    weekday_local: np.ndarray
    holiday: np.ndarray
    country: str | None


def calendar(index: pd.DatetimeIndex, region: str, timezone: str = "UTC") -> Calendar:
    """Calendar features of ``index`` (naive UTC) for ``region`` in ``timezone``."""
    import holidays

    local = index.tz_localize("UTC").tz_convert(timezone)
    country = holiday_country(region)
    flags = np.zeros(len(index))
    if country is not None:
        years = sorted(set(local.year))
        days = holidays.country_holidays(country, years=years)
        dates = pd.Index(local.date)
        unique = dates.unique()
        is_holiday = {d: d in days for d in unique}
        flags = np.asarray([is_holiday[d] for d in dates], dtype=float)
    else:
        log.debug("no public-holiday calendar for region %s; holiday feature off", region)
    return Calendar(
        hour_local=np.asarray(local.hour, dtype=int),
        weekday_local=np.asarray(local.day_of_week, dtype=int),
        holiday=flags,
        country=country,
    )
