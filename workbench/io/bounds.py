"""Physical plausibility bounds of imported quantities, checked before anything is written.

A value outside its bound is almost always a unit mistake (MWh read as kWh, tonnes as
grams) or a corrupt file; one such row can poison every plan built from the store, so the
import stops and names the row. The table is documented in ``docs/importers.md``
("Plausibility bounds"). Bounds are deliberately wide: they catch wrong units and
overflow, not unusual markets. Negative prices are real (surplus renewables) and accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from workbench.io.errors import InputError

PRICE_UNITS_PER_KWH = 100.0
"""A price per kWh lies within +-100 of its currency's unit scale (+-100 USD/kWh)."""

CURRENCY_SCALE: dict[str, float] = {
    # Order of magnitude of one US dollar in the currency (2020s), rounded up: a bound, not
    # an exchange rate.
    "USD": 1, "EUR": 1, "GBP": 1, "CHF": 1, "CAD": 2, "AUD": 2, "NZD": 2, "SGD": 2,
    "CNY": 10, "DKK": 10, "NOK": 20, "SEK": 20, "PLN": 5, "BRL": 10, "ZAR": 20, "MXN": 20,
    "HKD": 10, "ILS": 5, "AED": 5, "SAR": 5, "TRY": 50, "CZK": 30, "TWD": 40,
    "JPY": 200, "INR": 100, "RUB": 100, "PHP": 100, "THB": 50, "HUF": 500,
    "KRW": 2000, "CLP": 1000, "COP": 5000, "IDR": 20000, "VND": 30000,
}
"""Units of a currency per US dollar, as an upper order of magnitude (for price bounds)."""

UNKNOWN_CURRENCY_SCALE = 30000.0
"""Scale of a currency missing from :data:`CURRENCY_SCALE` (the widest listed)."""


@dataclass(frozen=True)
class Bound:
    """The plausible range ``[low, high]`` of one quantity in its stored unit.

    ``low_open``/``high_open`` make an end exclusive (a step time of exactly 0 s is
    impossible).
    """

    quantity: str
    unit: str
    low: float
    high: float
    why: str
    low_open: bool = False
    high_open: bool = False

    def outside(self, values: np.ndarray) -> np.ndarray:
        """Mask of values outside the bound (NaN and infinities are outside)."""
        v = np.asarray(values, dtype=float)
        with np.errstate(invalid="ignore"):
            below = v <= self.low if self.low_open else v < self.low
            above = v >= self.high if self.high_open else v > self.high
        return ~np.isfinite(v) | below | above

    def describe(self) -> str:
        lo = "(" if self.low_open else "["
        hi = ")" if self.high_open else "]"
        return f"{lo}{self.low:g}, {self.high:g}{hi} {self.unit}"


CARBON_AVERAGE = Bound("average carbon intensity", "gCO2/kWh", 0.0, 2000.0,
                       "lignite, the dirtiest fuel, emits about 1,100-1,300 gCO2/kWh")
CARBON_MARGINAL = Bound("marginal carbon intensity", "gCO2/kWh", -2000.0, 2000.0,
                        "marginal rates (WattTime, AVERT) may be negative; a plant emits "
                        "at most about 1,300 gCO2/kWh")
STEP_TIME = Bound("step time", "s", 0.0, 86400.0, "a training step takes more than 0 s "
                  "and less than a day", low_open=True)
SYNC_TIME = Bound("sync time", "s", 0.0, 86400.0, "a gradient sync takes 0 s or more and "
                  "less than a day")
EPOCH_TIME = Bound("time per epoch", "s", 0.0, 365 * 86400.0,
                   "an epoch takes more than 0 s", low_open=True)
LATENCY = Bound("round-trip latency", "ms", 0.0, 1e5, "a round trip takes less than 100 s, "
                "as latency_ms in a scenario config")
POWER_LIMIT = Bound("GPU power limit", "W", 0.0, 5000.0, "a GPU's power limit (TDP) is "
                    "positive and below 5 kW", low_open=True)


GENERATION = Bound("generation", "kW", 0.0, 1e8, "a plant delivers 0 kW or more and less "
                   "than 100 GW")
IRRADIANCE = Bound("irradiance", "W/m2", 0.0, 1500.0, "the sun delivers at most about "
                   "1,360 W/m2 above the atmosphere")
WIND_SPEED = Bound("wind speed", "m/s", 0.0, 120.0, "the strongest measured gusts are "
                   "about 110 m/s")


def price_bound(currency: str) -> Bound:
    """Plausible price per kWh in ``currency``: ``|price| <= 100 x scale(currency)``."""
    scale = CURRENCY_SCALE.get(currency.upper(), UNKNOWN_CURRENCY_SCALE)
    limit = PRICE_UNITS_PER_KWH * scale
    return Bound("electricity price", f"{currency}/kWh", -limit, limit,
                 f"+-{PRICE_UNITS_PER_KWH:g} x {currency}'s scale of {scale:g} per USD")


def power_bound(tdp_w: float) -> Bound:
    """Plausible average GPU power: more than 0 W and at most twice the power limit."""
    return Bound("average power", "W", 0.0, 2.0 * tdp_w,
                 f"a GPU draws more than 0 W and at most twice its {tdp_w:g} W limit",
                 low_open=True)


def check(
    values: np.ndarray, bound: Bound, path: str, column: str | None = None,
    where: Callable[[int], int | None] | None = None,
    shown: np.ndarray | None = None, shown_unit: str | None = None,
    label: Callable[[int], str] | None = None,
) -> None:
    """Raise :class:`InputError` at the first value outside ``bound``.

    ``values`` are in the bound's (stored) unit; ``shown`` are the same values as the file
    wrote them (before unit conversion) for the message. ``where(i)`` gives row ``i``'s line;
    ``label(i)`` a prefix naming row ``i`` where lines are unknown (a time, a JSON key).
    """
    bad = bound.outside(values)
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    v = float(np.asarray(values, dtype=float)[i])
    raw = "" if shown is None else f"{float(shown[i]):g} {shown_unit or ''}".rstrip() + " = "
    what = (f"{raw}{v:g} {bound.unit} overflows (not a finite number after conversion)"
            if not np.isfinite(v) and shown is not None and np.isfinite(float(shown[i]))
            else f"{raw}{v:g} {bound.unit} is outside the plausible {bound.quantity} range "
            f"{bound.describe()} ({bound.why})")
    line = None if where is None else where(i)
    prefix = label(i) if label else ""
    raise InputError(path, f"{prefix}{what}", "check the unit (e.g. /MWh against /kWh, g "
                     "against t) or correct the row", line=line, column=column)
