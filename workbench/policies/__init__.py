"""Scheduling policies behind one interface, and a registry to build them by name.

``make_policy("lyapunov", V=20)`` returns a fresh :class:`~workbench.policies.base.Policy`.
Baselines live in :mod:`workbench.policies.baselines` and are imported only when asked for.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from workbench.policies.base import Policy

if TYPE_CHECKING:
    from workbench.model import Scenario

HINDSIGHT_ARG = "scenario"
"""The constructor argument through which a hindsight policy receives the true scenario;
it is no knob (:func:`policy_knobs` leaves it out)."""

_REGISTRY: dict[str, tuple[str, str]] = {
    "lyapunov": ("workbench.policies.lyapunov", "LyapunovPolicy"),
    "threshold": ("workbench.policies.threshold", "ThresholdPolicy"),
    "lookahead": ("workbench.policies.lookahead", "LookaheadPolicy"),
    "lookahead-groups": ("workbench.policies.grouped", "GroupedLookahead"),
    "offline": ("workbench.policies.offline", "OfflinePolicy"),
    "greedy": ("workbench.policies.greedy", "GreedyPolicy"),
    "asap-home": ("workbench.policies.baselines", "AsapHome"),
    "cheapest-at-arrival": ("workbench.policies.baselines", "CheapestAtArrival"),
    "wait-for-cheap": ("workbench.policies.baselines", "WaitForCheap"),
    "carbon-scaling": ("workbench.policies.baselines", "CarbonScaling"),
    "goodput-only": ("workbench.policies.baselines", "GoodputOnly"),
    "follow-renewables": ("workbench.policies.green", "FollowRenewables"),
    "power-limit-only": ("workbench.policies.green", "PowerLimitOnly"),
}

POLICY_NAMES: tuple[str, ...] = tuple(_REGISTRY)
"""Every name :func:`make_policy` accepts."""

DEFAULT_POLICY = "lookahead"
"""The product's default policy (``workbench plan``): the best of the real-grid battery
(``bench/battery.py``, docs/results/battery.md) at no more deadline misses."""


def policy_class(name: str) -> Callable[..., Policy]:
    """The class registered under ``name`` (imported on first use)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
    module, attr = _REGISTRY[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name != module:
            raise
        raise ValueError(f"policy {name!r} is registered but {module} is not installed "
                         f"yet") from err
    cls: Callable[..., Policy] = getattr(mod, attr)
    return cls


def plans_batteries(name: str) -> bool:
    """Whether the policy registered under ``name`` plans the sites' batteries (a class
    attribute ``plans_batteries``): only such a policy keeps a grid event below what a site
    draws whatever runs, by discharging its battery through it."""
    return bool(getattr(policy_class(name), "plans_batteries", False))


def unsuitable(name: str, scenario: Scenario) -> str | None:
    """Why the policy registered under ``name`` makes no plan of its own on ``scenario``
    (it would run as another policy does, e.g. ``follow-renewables`` without on-site
    renewables), or None: a policy class may say so in a classmethod ``unsuitable``."""
    check = getattr(policy_class(name), "unsuitable", None)
    return None if check is None else check(scenario)


def policy_knobs(name: str) -> Mapping[str, inspect.Parameter]:
    """The keyword knobs the policy registered under ``name`` takes, with their defaults."""
    params = inspect.signature(policy_class(name)).parameters
    return {k: v for k, v in params.items() if k != HINDSIGHT_ARG}


def needs_truth(name: str) -> bool:
    """Whether the policy is a hindsight one (it takes the true scenario)."""
    return HINDSIGHT_ARG in inspect.signature(policy_class(name)).parameters


def make_policy(name: str, truth: Scenario | None = None, **knobs: Any) -> Policy:
    """Build the policy registered under ``name`` with keyword ``knobs``.

    ``truth`` (the true scenario) is handed only to a hindsight policy (:func:`needs_truth`,
    ``offline``); every other policy sees only what an operator knows.

    Raises
    ------
    ValueError
        For an unknown name or an invalid knob value (the message says which).
    """
    if truth is not None and needs_truth(name):
        knobs = {**knobs, HINDSIGHT_ARG: truth}
    return policy_class(name)(**knobs)


__all__ = ["DEFAULT_POLICY", "POLICY_NAMES", "Policy", "make_policy", "needs_truth",
           "plans_batteries", "policy_class", "policy_knobs", "unsuitable"]
