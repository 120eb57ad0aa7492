"""Units: the workbench's conversion factors, in one place.

The workbench keeps energy in kWh, power in W (GPUs) or kW (datacenters), carbon in kg CO2
(intensities in gCO2/kWh), prices in ``<currency>/kWh`` and times in UTC. The factors between
them are named here (:data:`G_PER_KG`, :data:`J_PER_KWH`, :data:`W_PER_KW`, :data:`MS_PER_S`,
:data:`KILO`), so that a conversion reads ``grams / G_PER_KG``, never a bare ``/ 1000``.

Grid signals arrive in other units: :func:`carbon_factor` and :func:`price_factor` turn them
into ``gCO2/kWh`` and ``<currency>/kWh``. Carbon units are ``<mass>/<energy>`` with mass
``g``, ``kg``, ``t`` or ``lb`` (an optional ``CO2``, ``CO2e`` or ``CO2eq`` after it is
ignored) and energy ``Wh``, ``kWh``, ``MWh`` or ``GWh``: ``lb/MWh`` is WattTime's MOER,
``lb/kWh`` AVERT's. Price units are ``<currency>/<energy>``: a three-letter ISO code
(``USD/MWh``), or ``$``/``€``/``£`` for USD, EUR and GBP.
"""

from __future__ import annotations

import re

G_PER_KG = 1000.0
"""Grams per kilogram: ``kg = g / G_PER_KG`` (carbon in kg from gCO2/kWh x kWh)."""

J_PER_KWH = 3.6e6
"""Joules (watt-seconds) per kWh: ``kWh = W x s / J_PER_KWH``."""

W_PER_KW = 1000.0
"""Watts per kilowatt: ``kW = W / W_PER_KW``."""

MS_PER_S = 1000.0
"""Milliseconds per second: ``s = ms / MS_PER_S``."""

KILO = 1000.0
"""One SI prefix step (milli to unit, mega to giga, giga to tera): ``W = mW / KILO``,
``GHz = MHz / KILO``, ``TFLOPS = GFLOPS / KILO``."""

LB_TO_G = 453.59237
"""Grams per avoirdupois pound (exact)."""

_MASS_G = {"mg": 1e-3, "g": 1.0, "kg": 1e3, "t": 1e6, "tonne": 1e6, "tonnes": 1e6,
           "lb": LB_TO_G, "lbs": LB_TO_G}
_ENERGY_KWH = {"wh": 1e-3, "kwh": 1.0, "mwh": 1e3, "gwh": 1e6,
               "kwhr": 1.0, "mwhr": 1e3}
_SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP"}
_GAS_RE = re.compile(r"(co2|co₂)(eq|e)?", re.IGNORECASE)


class UnitError(ValueError):
    """A unit string cannot be understood; the message lists what is accepted."""


def _split(unit: str) -> tuple[str, str]:
    text = unit.strip().replace(" ", "")
    if text.count("/") != 1:
        raise UnitError(f"unit {unit!r} is not of the form <quantity>/<energy>")
    num, den = text.split("/")
    return num, den.lower()


def _energy(den: str, unit: str) -> float:
    if den not in _ENERGY_KWH:
        raise UnitError(
            f"unknown energy unit in {unit!r}; use one of Wh, kWh, MWh, GWh"
        )
    return _ENERGY_KWH[den]


def carbon_factor(unit: str) -> float:
    """Factor turning a value in ``unit`` into gCO2/kWh (``lb/MWh`` -> 0.45359237)."""
    num, den = _split(unit)
    mass = _GAS_RE.sub("", num).lower()
    if mass not in _MASS_G:
        raise UnitError(
            f"unknown carbon unit {unit!r}; use <mass>/<energy> with mass g, kg, t or lb "
            "(e.g. gCO2/kWh, lb/MWh)"
        )
    return _MASS_G[mass] / _energy(den, unit)


def price_factor(unit: str, currency: str | None = None) -> tuple[float, str]:
    """Factor turning a price in ``unit`` into ``<currency>/kWh``, and that currency.

    ``unit`` may omit the currency (``/MWh`` or ``MWh``) when ``currency`` is given; when
    both name one, they must agree.
    """
    text = unit.strip().replace(" ", "")
    if "/" not in text:
        text = "/" + text
    num, den = _split(text)
    factor = 1.0 / _energy(den, unit)
    named = _SYMBOLS.get(num, num.upper()) if num else None
    if named is not None and not re.fullmatch(r"[A-Z]{3}", named):
        raise UnitError(
            f"unknown currency {num!r} in price unit {unit!r}; use a three-letter ISO code "
            "such as USD, EUR, CNY, JPY"
        )
    given = currency.strip().upper() if currency else None
    if given is not None and not re.fullmatch(r"[A-Z]{3}", given):
        raise UnitError(f"currency {currency!r} is not a three-letter ISO code (USD, EUR, CNY)")
    if named and given and named != given:
        raise UnitError(f"the file's unit {unit!r} says {named} but --currency says {given}")
    cur = named or given
    if cur is None:
        raise UnitError(f"price unit {unit!r} names no currency; pass --currency")
    return factor, cur
