"""The caps of a run in one typed record: carbon budgets (kg over the horizon) and power caps.

A carbon budget is global (``carbon_kg``), per datacenter (``carbon_kg_by_dc``), or a
percentage below the comparison baseline's carbon (``carbon_pct_below_baseline``, resolved
to kg by the runner once the baseline has run: :meth:`Caps.resolved`). A power cap is
per datacenter and slot, in kW of grid import at the site's connection as the site meter
reads it (:mod:`workbench.meter`: its jobs x PUE, idle load, transfers and battery
charging, less own supply): one number for every datacenter (``power_kw``) or one per
datacenter (``power_kw_by_dc``).

Values are checked when the record is made (positive, finite; a percentage in [0, 100)) and
datacenter names against a scenario with :meth:`Caps.check_names`; both raise
``ValueError`` with a message that says what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench.events import GridEvent

STORED_KNOBS = ("carbon_cap_kg", "power_cap_kw", "grid_events")
"""The names under which a run's stored knobs (``meta["knobs"]``) hold its caps
(:meth:`Caps.knobs`, read back by :meth:`Caps.from_stored`)."""


def _positive(value: Any, what: str, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive finite number of {unit}, got {value!r}")
    return float(value)


def kg_text(kg: float) -> str:
    """A mass of CO2 in kg as messages write it: one decimal from 10 kg up (``1,234.5``),
    else three significant digits (a 0.0438 kg cap is not "0.0 kg")."""
    v = float(kg)
    return f"{v:,.1f}" if not math.isfinite(v) or abs(v) >= 10 else f"{v:.3g}"


@dataclass(frozen=True)
class Caps:
    """Carbon budgets and power caps of one run (all optional; ``Caps()`` caps nothing).

    Attributes
    ----------
    carbon_kg : float, optional
        Carbon budget over the horizon for the whole fleet, kg CO2.
    carbon_kg_by_dc : mapping datacenter -> float
        Carbon budget over the horizon per datacenter, kg CO2 (exclusive with the others).
    carbon_pct_below_baseline : float, optional
        The budget as a percentage in [0, 100) below the baseline run's carbon.
    power_kw : float, optional
        Grid import cap of every datacenter in every slot, kW.
    power_kw_by_dc : mapping datacenter -> float
        Grid import cap per datacenter, kW (exclusive with ``power_kw``).
    events : tuple of GridEvent
        Grid events (:mod:`workbench.events`): a lower import limit at one datacenter for
        some hours, known to a policy from its notice on.
    """

    carbon_kg: float | None = None
    carbon_kg_by_dc: Mapping[str, float] = field(default_factory=dict)
    carbon_pct_below_baseline: float | None = None
    power_kw: float | None = None
    power_kw_by_dc: Mapping[str, float] = field(default_factory=dict)
    events: tuple[GridEvent, ...] = ()

    def __post_init__(self) -> None:
        given = [self.carbon_kg is not None, bool(self.carbon_kg_by_dc),
                 self.carbon_pct_below_baseline is not None]
        if sum(given) > 1:
            raise ValueError("give one carbon cap: kg for the fleet, kg per datacenter, or a "
                             "percentage below the baseline")
        if self.power_kw is not None and self.power_kw_by_dc:
            raise ValueError("give one power cap: kW for every datacenter or kW per datacenter")
        if self.carbon_kg is not None:
            object.__setattr__(self, "carbon_kg",
                               _positive(self.carbon_kg, "carbon cap", "kg CO2"))
        if self.power_kw is not None:
            object.__setattr__(self, "power_kw", _positive(self.power_kw, "power cap", "kW"))
        object.__setattr__(self, "carbon_kg_by_dc", {
            str(k): _positive(v, f"carbon cap of {k}", "kg CO2")
            for k, v in dict(self.carbon_kg_by_dc).items()})
        object.__setattr__(self, "power_kw_by_dc", {
            str(k): _positive(v, f"power cap of {k}", "kW")
            for k, v in dict(self.power_kw_by_dc).items()})
        object.__setattr__(self, "events", tuple(self.events))
        for ev in self.events:
            if not isinstance(ev, GridEvent):
                raise ValueError(f"grid events must be GridEvent records, got {ev!r}")
        pct = self.carbon_pct_below_baseline
        if pct is not None:
            if isinstance(pct, bool) or not isinstance(pct, int | float) or not (
                    math.isfinite(pct) and 0 <= pct < 100):
                raise ValueError(f"carbon cap percentage must be in [0, 100) below the "
                                 f"baseline, got {pct!r}")
            object.__setattr__(self, "carbon_pct_below_baseline", float(pct))

    def __hash__(self) -> int:
        return hash((self.carbon_kg, tuple(sorted(self.carbon_kg_by_dc.items())),
                     self.carbon_pct_below_baseline, self.power_kw,
                     tuple(sorted(self.power_kw_by_dc.items())), self.events))

    # -- construction from the knobs policies take -----------------------------------------
    @classmethod
    def from_knobs(cls, carbon_cap_kg: float | Mapping[str, float] | None = None,
                   power_cap_kw: float | Mapping[str, float] | None = None) -> Caps:
        """From the policies' ``carbon_cap_kg`` / ``power_cap_kw`` knobs (a number or a
        mapping datacenter -> number)."""
        carbon: dict[str, Any] = (
            {} if carbon_cap_kg is None
            else {"carbon_kg_by_dc": carbon_cap_kg} if isinstance(carbon_cap_kg, Mapping)
            else {"carbon_kg": carbon_cap_kg})
        power: dict[str, Any] = (
            {} if power_cap_kw is None
            else {"power_kw_by_dc": power_cap_kw} if isinstance(power_cap_kw, Mapping)
            else {"power_kw": power_cap_kw})
        return cls(**carbon, **power)

    @classmethod
    def from_stored(cls, knobs: Mapping[str, Any] | None) -> Caps:
        """The caps a run's stored knobs hold (:data:`STORED_KNOBS`; none: ``Caps()``),
        validated like any other."""
        k = knobs or {}
        caps = cls.from_knobs(k.get("carbon_cap_kg"), k.get("power_cap_kw"))
        events = tuple(GridEvent.from_dict(e) for e in k.get("grid_events") or ())
        return replace(caps, events=events) if events else caps

    @classmethod
    def parse_carbon(cls, text: str | None, **power: Any) -> Caps:
        """``None``/``"none"`` (no cap), ``"1200"`` (kg) or ``"20%"`` (below the baseline).

        Raises ValueError naming the accepted forms (the caller names the text and where
        it came from).
        """
        raw = "" if text is None else str(text).strip().lower()
        if raw in ("", "none"):
            return cls(**power)
        try:
            if raw.endswith("%"):
                return cls(carbon_pct_below_baseline=float(raw[:-1]), **power)
            return cls(carbon_kg=float(raw), **power)
        except ValueError:
            raise ValueError(
                "give kg CO2 over the horizon (a positive number, e.g. 1200) or a percentage "
                "below asap-home in [0, 100) (e.g. 20%)") from None

    # -- reading --------------------------------------------------------------------------
    @property
    def has_carbon(self) -> bool:
        return (self.carbon_kg is not None or bool(self.carbon_kg_by_dc)
                or self.carbon_pct_below_baseline is not None)

    @property
    def has_power(self) -> bool:
        return self.power_kw is not None or bool(self.power_kw_by_dc)

    @property
    def has_events(self) -> bool:
        return bool(self.events)

    @property
    def has_limits(self) -> bool:
        """Any limit on grid import: a power cap or a grid event."""
        return self.has_power or self.has_events

    def with_events(self, events: Sequence[GridEvent]) -> Caps:
        """The same caps with ``events`` (replacing any)."""
        return replace(self, events=tuple(events))

    @property
    def needs_baseline(self) -> bool:
        """A percentage budget is resolved against the baseline's carbon."""
        return self.carbon_pct_below_baseline is not None

    def carbon_total_kg(self) -> float | None:
        """The fleet's budget in kg (the sum of per-datacenter budgets), None without one
        or while a percentage is unresolved."""
        if self.carbon_kg_by_dc:
            return float(sum(self.carbon_kg_by_dc.values()))
        return self.carbon_kg

    def resolved(self, baseline_carbon_kg: float | None) -> Caps:
        """The same caps with a percentage budget turned into kg of the baseline's carbon."""
        pct = self.carbon_pct_below_baseline
        if pct is None:
            return self
        if baseline_carbon_kg is None or not math.isfinite(baseline_carbon_kg):
            raise ValueError("a percentage carbon cap needs the baseline's carbon")
        return replace(self, carbon_pct_below_baseline=None,
                       carbon_kg=baseline_carbon_kg * (1.0 - pct / 100.0))

    def carbon_scopes(self) -> dict[str, float]:
        """Each carbon budget by scope, kg: ``{"all": kg}`` for a fleet budget, one entry per
        datacenter otherwise (empty without a budget; a percentage must be resolved)."""
        if self.carbon_pct_below_baseline is not None:
            raise ValueError("resolve the percentage carbon cap against the baseline first")
        if self.carbon_kg_by_dc:
            return dict(self.carbon_kg_by_dc)
        return {} if self.carbon_kg is None else {"all": float(self.carbon_kg)}

    def power_kw_of(self, datacenter: str) -> float:
        """The grid import cap of ``datacenter``, kW (``inf`` without one)."""
        if self.power_kw is not None:
            return float(self.power_kw)
        return float(self.power_kw_by_dc.get(datacenter, math.inf))

    def power_kw_array(self, datacenters: Sequence[str]) -> NDArray[np.float64]:
        """The power caps of ``datacenters`` in order, kW (``inf`` where none applies).

        Raises ValueError for a cap naming a datacenter not in the list.
        """
        names = list(datacenters)
        self.check_names(names)
        return np.array([self.power_kw_of(n) for n in names], dtype=float)

    def carbon_groups(self, datacenters: Sequence[str]
                      ) -> tuple[NDArray[np.int64], NDArray[np.float64]] | None:
        """The carbon budgets as groups of datacenters, for a model's carbon rows: per
        datacenter (in order) its group (-1: not capped) and per group its budget, kg; None
        without a budget.

        Raises ValueError for a budget naming a datacenter not in the list, or an
        unresolved percentage.
        """
        names = list(datacenters)
        self.check_names(names)
        scopes = self.carbon_scopes()
        if not scopes:
            return None
        if "all" in scopes and not self.carbon_kg_by_dc:
            return np.zeros(len(names), dtype=np.int64), np.array([scopes["all"]])
        keys = [n for n in names if n in scopes]
        group = np.array([keys.index(n) if n in scopes else -1 for n in names], dtype=np.int64)
        return group, np.array([float(scopes[k]) for k in keys])

    def with_carbon_kg(self, carbon_kg: float | None) -> Caps:
        """The same power caps with a fleet budget of ``carbon_kg`` (None: no budget)."""
        return Caps(carbon_kg=carbon_kg, power_kw=self.power_kw,
                    power_kw_by_dc=self.power_kw_by_dc, events=self.events)

    def merged(self, other: Caps) -> Caps:
        """The caps of both records (each kind from the one that has it; ``self`` wins
        where both do)."""
        carbon = self if self.has_carbon else other
        power = self if self.has_power else other
        return Caps(carbon_kg=carbon.carbon_kg, carbon_kg_by_dc=carbon.carbon_kg_by_dc,
                    carbon_pct_below_baseline=carbon.carbon_pct_below_baseline,
                    power_kw=power.power_kw, power_kw_by_dc=power.power_kw_by_dc,
                    events=self.events or other.events)

    def power_only(self) -> Caps:
        """The power caps and grid events alone (the limits on the sites' import)."""
        return Caps(power_kw=self.power_kw, power_kw_by_dc=self.power_kw_by_dc,
                    events=self.events)

    def metered(self) -> Caps:
        """The power caps alone: what a comparison run is metered against (its import
        against each cap, reported). A grid event the spec gives is the planned run's:
        a comparison neither holds it nor is reported on it, so it is not its cap (a
        scenario's own events hold every run, :func:`workbench.runner.
        with_scenario_events`)."""
        return Caps(power_kw=self.power_kw, power_kw_by_dc=self.power_kw_by_dc)

    def knobs(self) -> dict[str, Any]:
        """The caps as the policies' knobs: ``carbon_cap_kg`` and ``power_cap_kw`` (a number
        or a mapping datacenter -> number), only those that are set.

        Raises ValueError for an unresolved percentage (:meth:`resolved` first).
        """
        if self.carbon_pct_below_baseline is not None:
            raise ValueError("resolve the percentage carbon cap against the baseline first")
        out: dict[str, Any] = {}
        if self.carbon_kg_by_dc:
            out["carbon_cap_kg"] = dict(self.carbon_kg_by_dc)
        elif self.carbon_kg is not None:
            out["carbon_cap_kg"] = self.carbon_kg
        if self.power_kw_by_dc:
            out["power_cap_kw"] = dict(self.power_kw_by_dc)
        elif self.power_kw is not None:
            out["power_cap_kw"] = self.power_kw
        if self.events:
            out["grid_events"] = [e.as_dict() for e in self.events]
        return out

    def check_names(self, datacenters: Iterable[str]) -> None:
        """Raise ValueError when a per-datacenter cap names a datacenter not in the list."""
        known = list(datacenters)
        for what, caps in (("carbon", self.carbon_kg_by_dc), ("power", self.power_kw_by_dc)):
            unknown = sorted(set(caps) - set(known))
            if unknown:
                raise ValueError(f"{what} cap for unknown datacenter(s) {', '.join(unknown)}; "
                                 f"the scenario has {', '.join(known)}")

    @property
    def label(self) -> str:
        """One short line: ``"none"``, ``"1200 kg"``, ``"20%"`` (below the baseline),
        ``"a 100 kg, b 200 kg"``, with ``"8 kW"`` power caps after a ``;``."""
        parts = []
        if self.carbon_kg is not None:
            parts.append(f"{self.carbon_kg:g} kg")
        if self.carbon_kg_by_dc:
            parts.append(", ".join(f"{k} {v:g} kg" for k, v in self.carbon_kg_by_dc.items()))
        if self.carbon_pct_below_baseline is not None:
            parts.append(f"{self.carbon_pct_below_baseline:g}%")
        if self.power_kw is not None:
            parts.append(f"{self.power_kw:g} kW")
        if self.power_kw_by_dc:
            parts.append(", ".join(f"{k} {v:g} kW" for k, v in self.power_kw_by_dc.items()))
        if self.events:
            parts.append(f"{len(self.events)} grid event{'s' if len(self.events) > 1 else ''}")
        return "; ".join(parts) or "none"


__all__ = ["STORED_KNOBS", "Caps"]
