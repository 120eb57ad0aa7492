"""Output of a site's solar and wind plants over a scenario's horizon, from libraries of the
field: pvlib (solar) and windpowerlib (wind).

**Solar** (:func:`solar_kw`), for a plant of ``capacity_kw`` (AC) at latitude, longitude,
tilt and azimuth (0 = north, 180 = south, pvlib's convention):

1. irradiance: pvlib's Ineichen-Perez clear-sky model (``Location.get_clearsky``, with the
   Linke turbidity climatology that ships inside pvlib: nothing is downloaded), or an
   imported global horizontal irradiance series split into direct and diffuse by the Erbs
   model (``pvlib.irradiance.erbs``);
2. plane of array: ``pvlib.irradiance.get_total_irradiance`` (isotropic sky) at the sun's
   position (``pvlib.solarposition.get_solarposition``);
3. cell temperature: the SAPM model (open rack, glass/polymer) at an assumed 20 C air and
   1 m/s wind (no weather is imported);
4. DC power: PVWatts, ``pdc0 = capacity_kw``, ``gamma = -0.4 %/C``, less ``losses``;
   AC: clipped at ``capacity_kw`` (the inverter).

Each slot's value is the mean over points every ``min(slot, 15 min)`` inside it (their
midpoints). An imported *generation* series (kW) is used as it is, clipped at the capacity.

**Wind** (:func:`wind_kw`): an imported wind speed series (m/s) at ``measurement_height_m``
is carried to ``hub_height_m`` by the logarithmic profile
(``windpowerlib.wind_speed.logarithmic_profile``, roughness length ``z0``) and turned into
power by the turbine type's power curve from windpowerlib's turbine library
(``windpowerlib.power_output.power_curve``), scaled from one turbine's nominal power to
``capacity_kw``. An imported generation series is used as it is.

Series are sampled at the slots by :func:`series_at_slots` (the mean of the series' values
inside each slot; a slot between two samples takes the latest value before it), and a gap
is an error unless the scenario holds values forward.
"""

from __future__ import annotations

import functools
import logging
import warnings
from datetime import datetime

import numpy as np
import pandas as pd
from numpy.typing import NDArray

log = logging.getLogger(__name__)

TEMP_AIR_C = 20.0
"""Air temperature assumed for the cell temperature model, C (no weather is imported)."""

WIND_SPEED_M_S = 1.0
"""Wind speed assumed for the cell temperature model, m/s."""

GAMMA_PDC = -0.004
"""PVWatts temperature coefficient of DC power, 1/C (crystalline silicon)."""

DEFAULT_TURBINE = "E-126/4200"
"""windpowerlib turbine type used when a wind entry names none (a 4.2 MW Enercon)."""


class SeriesError(ValueError):
    """A series does not cover the horizon or holds impossible values; the message says how
    to fix it."""


def _sample_times(start: datetime, slot_s: int, n_slots: int
                  ) -> tuple[pd.DatetimeIndex, int]:
    """Points inside every slot (midpoints of ``k`` equal parts, ``k = ceil(slot / 15 min)``)
    and ``k``."""
    k = max(int(np.ceil(slot_s / 900.0)), 1)
    step = slot_s / k
    base = pd.Timestamp(start).tz_convert("UTC")
    offsets = (np.arange(n_slots * k) + 0.5) * step
    return pd.DatetimeIndex(base + pd.to_timedelta(offsets, unit="s")), k


def solar_kw(
    start: datetime, slot_s: int, n_slots: int, *, capacity_kw: float, latitude: float,
    longitude: float, tilt_deg: float, azimuth_deg: float, altitude_m: float = 0.0,
    losses: float = 0.14, ghi_w_m2: pd.Series | None = None,
) -> NDArray[np.float64]:
    """A solar plant's AC output per slot, kW (see the module docstring).

    ``ghi_w_m2``: measured global horizontal irradiance indexed by UTC time (None: clear
    sky); it is sampled at the slots' points (latest value before each).
    """
    import pvlib

    times, k = _sample_times(start, slot_s, n_slots)
    loc = pvlib.location.Location(latitude, longitude, tz="UTC", altitude=altitude_m)
    pos = loc.get_solarposition(times)
    if ghi_w_m2 is None:
        sky = loc.get_clearsky(times, model="ineichen", solar_position=pos)
        ghi, dni, dhi = sky["ghi"], sky["dni"], sky["dhi"]
    else:
        ghi = _at_points(ghi_w_m2, times)
        split = pvlib.irradiance.erbs(ghi, pos["zenith"], times)
        dni, dhi = split["dni"], split["dhi"]
    poa = pvlib.irradiance.get_total_irradiance(
        tilt_deg, azimuth_deg, pos["apparent_zenith"], pos["azimuth"], dni, ghi, dhi,
        model="isotropic")["poa_global"].clip(lower=0.0).fillna(0.0)
    params = pvlib.temperature.TEMPERATURE_MODEL_PARAMETERS["sapm"]["open_rack_glass_polymer"]
    cell = pvlib.temperature.sapm_cell(poa, TEMP_AIR_C, WIND_SPEED_M_S, **params)
    dc = pvlib.pvsystem.pvwatts_dc(poa, cell, capacity_kw, GAMMA_PDC) * (1.0 - losses)
    ac = np.clip(np.asarray(dc, dtype=float), 0.0, capacity_kw)
    return np.asarray(ac.reshape(n_slots, k).mean(axis=1), dtype=float)


@functools.cache
def turbine_types() -> tuple[str, ...]:
    """The turbine types windpowerlib ships a power curve for (its own table, offline)."""
    from windpowerlib import get_turbine_types

    table = get_turbine_types(print_out=False)
    return tuple(sorted(table.loc[table["has_power_curve"].astype(bool), "turbine_type"]))


def wind_kw(
    start: datetime, slot_s: int, n_slots: int, *, capacity_kw: float,
    wind_speed_m_s: pd.Series, turbine_type: str | None = None, hub_height_m: float = 100.0,
    measurement_height_m: float | None = None, roughness_length_m: float = 0.15,
) -> NDArray[np.float64]:
    """A wind farm's output per slot, kW, from a wind speed series (see the module
    docstring).

    Raises
    ------
    SeriesError
        For a turbine type windpowerlib does not know.
    """
    from windpowerlib import WindTurbine, power_output
    from windpowerlib.wind_speed import logarithmic_profile

    name = turbine_type or DEFAULT_TURBINE
    try:
        with warnings.catch_warnings():
            # An unknown type only warns there; the missing curve is reported below.
            warnings.simplefilter("ignore")
            turbine = WindTurbine(hub_height=hub_height_m, turbine_type=name)
    except (KeyError, ValueError) as exc:
        raise SeriesError(f"windpowerlib knows no turbine type {name!r} with a power curve "
                          f"({exc}); pick one of windpowerlib.get_turbine_types()") from None
    if turbine.power_curve is None or turbine.nominal_power is None:
        raise SeriesError(f"turbine type {name!r} has no power curve in windpowerlib; pick "
                          "one with has_power_curve")
    times, k = _sample_times(start, slot_s, n_slots)
    v = _at_points(wind_speed_m_s, times)
    height = measurement_height_m or hub_height_m
    if height != hub_height_m:
        v = logarithmic_profile(v, height, hub_height_m, roughness_length_m)
    curve = turbine.power_curve
    watts = power_output.power_curve(pd.Series(np.asarray(v, dtype=float)),
                                     curve["wind_speed"], curve["value"])
    per_turbine = np.asarray(watts, dtype=float) / float(turbine.nominal_power)
    out = np.clip(per_turbine, 0.0, 1.0) * capacity_kw
    return np.asarray(out.reshape(n_slots, k).mean(axis=1), dtype=float)


def _at_points(series: pd.Series, times: pd.DatetimeIndex) -> pd.Series:
    """The series' latest value at or before each time (a step function)."""
    s = series.sort_index()
    idx = pd.DatetimeIndex(s.index)
    idx = idx.tz_localize("UTC") if idx.tz is None else idx.tz_convert("UTC")
    pos = idx.searchsorted(times, side="right") - 1
    vals = np.asarray(s.to_numpy(dtype=float))
    return pd.Series(np.where(pos >= 0, vals[np.clip(pos, 0, None)], np.nan), index=times)


def series_at_slots(series: pd.Series, start: datetime, slot_s: int, n_slots: int, *,
                    name: str, hold: bool = False) -> NDArray[np.float64]:
    """A series' mean value in each slot, from samples indexed by UTC time.

    A slot without a sample inside takes the latest sample before it, if that lies within
    one step of the series (its median interval, at least a slot); a slot before the first
    sample or further from one is an error unless ``hold`` (then it takes the nearest
    value).

    Raises
    ------
    SeriesError
        Naming the series, the first slot it does not cover and the fix.
    """
    if series.empty:
        raise SeriesError(f"series {name!r} holds no values; import it first (workbench "
                          f"import grid csv ... --region {name})")
    s = series.sort_index()
    idx = pd.DatetimeIndex(s.index)
    idx = idx.tz_localize("UTC") if idx.tz is None else idx.tz_convert("UTC")
    vals = s.to_numpy(dtype=float)
    t0 = pd.Timestamp(start).tz_convert("UTC")
    edges = t0 + pd.to_timedelta(np.arange(n_slots + 1) * slot_s, unit="s")
    lo = idx.searchsorted(edges[:-1], side="left")
    hi = idx.searchsorted(edges[1:], side="left")
    csum = np.concatenate([[0.0], np.cumsum(vals)])
    count = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (csum[hi] - csum[lo]) / count
    before = idx.searchsorted(edges[:-1], side="right") - 1
    held = np.where(before >= 0, vals[np.clip(before, 0, None)], np.nan)
    out = np.where(count > 0, mean, held)
    step = pd.Timedelta(seconds=max(float(np.median(np.diff(idx.asi8))) / 1e9
                                    if len(idx) > 1 else 0.0, float(slot_s)))
    gap = np.zeros(n_slots, dtype=bool)
    ok_before = before >= 0
    gap[ok_before] = (edges[:-1][ok_before] - idx[before[ok_before]]) >= step * 1.001
    bad = ~np.isfinite(out) | (gap & (count == 0))
    if bad.any():
        if not hold:
            first = int(np.flatnonzero(bad)[0])
            raise SeriesError(
                f"series {name!r} does not cover the slot starting {edges[first]} (it holds "
                f"{idx[0]} .. {idx[-1]}); import that period or set [scenario] fill = 'hold'")
        nearest = vals[np.clip(idx.searchsorted(edges[:-1]), 0, len(vals) - 1)]
        out = np.where(bad, nearest, out)
    return np.asarray(out, dtype=float)


__all__ = ["DEFAULT_TURBINE", "SeriesError", "series_at_slots", "solar_kw", "wind_kw"]
