"""The sidebar's knobs: their choices, their defaults (read from the policies) and the rules
a typed value must follow (:func:`check_knob`). No state: the state and the views read them."""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.caps import Caps
from workbench.policies import POLICY_NAMES, policy_knobs
from workbench.policies.lyapunov import V_MAX
from workbench.power_limits import DEFAULT_MENU

V_STEPS: tuple[float, ...] = (
    0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
)
"""Values of the log-scale V slider."""

GPU_COUNT_CHOICES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
SLOT_MINUTES: tuple[int, ...] = (15, 30, 60)
CAP_MODES: tuple[str, ...] = ("none", "global", "per datacenter")
BASELINES: tuple[str, ...] = tuple(
    n for n in POLICY_NAMES if n not in ("lyapunov", "greedy", "lookahead-groups")
)
"""Policies the run is compared with in the Metrics tab (the hindsight plan included; not
``lookahead-groups``, the default policy decomposed for fleets of dozens of sites)."""



def policy_default(policy: str, knob: str) -> Any:
    """The default of ``knob`` in ``policy``'s constructor, read from its signature.

    The app's widgets start from the library's defaults rather than copies of them, so a
    change of default in the library shows up in the app.
    """
    parameter = policy_knobs(policy).get(knob)
    if parameter is None or parameter.default is inspect.Parameter.empty:
        raise KeyError(f"policy {policy!r} has no knob {knob!r} with a default")
    return parameter.default


DEFAULT_V: float = float(policy_default("lyapunov", "V"))
"""Initial V of the app: :class:`workbench.policies.lyapunov.LyapunovPolicy`'s default."""
DEFAULT_MIGRATION_THRESHOLD: float = float(policy_default("lyapunov", "migration_threshold"))
"""Initial migration threshold of the app: the Lyapunov policy's default."""

HONEST_FORECAST = "default (honest)"
"""The Forecast choice that runs :func:`workbench.forecast.default_forecast_mode`."""


KNOB_RULES: dict[str, tuple[float, float, bool, str]] = {
    "V": (0.0, V_MAX, False,
          f"V weighs cost against queue backlogs: a number > 0 and <= {V_MAX:g}"),
    "carbon_cap_kg": (0.0, 1e9, False, "a carbon cap is kg CO2 over the horizon: a number > 0"),
    "migration_threshold": (0.0, 10.0, True,
                            "the migration threshold is a relative gain: a number >= 0 and <= 10"),
    "forecast_error": (0.0, 2.0, True,
                       "the forecast error is relative: a number >= 0 and <= 2 (200 %)"),
}
"""Typed knobs: (low, high, low allowed, what a valid value is). ``high`` is inclusive."""


def check_cap(text: str) -> tuple[Caps | None, str]:
    """Parse a global carbon cap as typed: kg CO2 over the horizon (``1200``) or a
    percentage below asap-home (``20%``), by the CLI's parser
    (:meth:`workbench.caps.Caps.parse_carbon`): ``(caps, "")`` or ``(None, reason)``."""
    raw = str(text).strip().replace(",", "")
    if not raw or raw.lower() == "none":
        return None, ("empty: give kg CO2 over the horizon (e.g. 1200) or a percentage below "
                      "asap-home (e.g. 20%); choose 'none' under Carbon cap for no cap")
    try:
        return Caps.parse_carbon(raw), ""
    except ValueError as exc:
        return None, f"{text!r}: {exc}"


def check_knob(knob: str, text: str) -> tuple[float | None, str]:
    """Parse what the operator typed for ``knob``: ``(value, "")`` or ``(None, reason)``.

    A per-datacenter cap (``carbon_cap_kg:<dc>``) follows ``carbon_cap_kg``'s rule.
    """
    low, high, low_ok, rule = KNOB_RULES[knob.split(":", 1)[0]]
    raw = str(text).strip().replace(",", "")
    if not raw:
        return None, f"empty: {rule}"
    try:
        value = float(raw)
    except ValueError:
        return None, f"{text!r} is not a number: {rule}"
    if not math.isfinite(value) or value > high or value < low or (value == low and not low_ok):
        return None, f"{value:g} is out of range: {rule}"
    return value, ""


def restored_knobs(info: Mapping[str, Any], policies: Sequence[str],
                   forecast_modes: Sequence[str]) -> dict[str, Any]:
    """The sidebar's values that repeat a stored run (:meth:`Store.run_info` ``info``): its
    policy, V, migration threshold, carbon cap (a percentage cap as the percentage, stored
    beside its resolved kg), GPU-count menu, forecast and GPU power limits (the default menu
    or none); values the sidebar cannot show are left out."""
    from workbench.runs import run_settings

    k = run_settings(info)
    update: dict[str, Any] = {}
    if info.get("policy") in policies:
        update["policy"] = info["policy"]
    for knob in ("V", "migration_threshold"):
        if knob in k and not check_knob(knob, str(k[knob]))[1]:
            update[knob] = float(k[knob])
    cap = k.get("carbon_cap_kg")
    if isinstance(cap, Mapping):
        update["carbon_caps_kg"] = {str(d): float(v) for d, v in cap.items()}
        update["cap_mode"] = "per datacenter"
    elif cap is not None:
        # A percentage cap is shown as typed ("10%"), its resolved kg kept beside it.
        pct = k.get("carbon_cap_pct")
        update["carbon_cap_kg"] = float(cap)
        update["carbon_cap_pct"] = None if pct is None else float(pct)
        update["cap_mode"] = "global"
    elif "policy" in update and "caps" in policy_knobs(update["policy"]):
        update["cap_mode"] = "none"
    update["gpu_counts"] = [int(n) for n in k.get("gpu_counts") or []
                            if int(n) in GPU_COUNT_CHOICES]
    if k.get("forecast_mode") in forecast_modes:
        update["forecast_mode"] = k["forecast_mode"]
        if k["forecast_mode"] == "noisy" and k.get("forecast_error"):
            update["forecast_error"] = float(k["forecast_error"])
    menu = k.get("power_limits")
    if isinstance(menu, list) and tuple(float(f) for f in menu) in ((), DEFAULT_MENU):
        update["power_limits"] = bool(menu)
    return update
