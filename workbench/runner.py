"""A run as an object: a frozen :class:`RunSpec` and the one path that runs it.

Every face (``workbench plan``, the app, the sweep, the benches) parses its input into a
:class:`RunSpec` and calls :func:`run_spec` (the run, its comparison baseline, its bound and
its attribution) or, for one policy alone, :func:`simulate_spec`; :func:`save_outcome`
stores what came back. Nothing else chooses the forecast, builds the policy, resolves the
caps, reads the hindsight bound or attributes the saving:

- the forecast mode is decided here alone (:func:`forecast_mode`: the spec's, else the
  honest default of :func:`workbench.forecast.default_forecast_mode`);
- the forecast model is fitted once per scenario (:func:`fit_forecast`) and handed to every
  run that shares it (the baseline, the comparisons, every point of a sweep);
- a percentage carbon cap is resolved against the baseline's carbon (:meth:`Caps.resolved`);
- the bound comes from the policy's declared
  :meth:`~workbench.policies.base.Policy.hindsight_bound`.

The knobs stored with a run (``meta["knobs"]``) are the policy's constructor knobs plus the
caps it is metered against, the same for every face.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from workbench import events
from workbench.bill import site_array
from workbench.caps import Caps, kg_text
from workbench.equal_work import bound_equal_work
from workbench.forecast import DEFAULT_MODEL, FORECAST_MODES, MODELS, default_forecast_mode
from workbench.metrics import attribute_savings
from workbench.outcome import RESIZE_S_DEFAULT, RESTART_S_DEFAULT
from workbench.policies import (
    DEFAULT_POLICY,
    POLICY_NAMES,
    make_policy,
    policy_knobs,
    unsuitable,
)
from workbench.policies.base import HindsightBound, Policy
from workbench.policies.offline import LeastCarbon
from workbench.power_limits import DEFAULT_MENU, check_menu
from workbench.recorders import LOCK_WAIT_S, SavedRuns, save_results
from workbench.sim import EMA_ALPHA_DEFAULT, Recorder, RunResult, simulate
from workbench.sim.results import RUN_WARNING, check_power_caps, check_scenario_events
from workbench.supply import ignore_set

if TYPE_CHECKING:
    from workbench.forecast import ModelForecast
    from workbench.model import Scenario

log = logging.getLogger(__name__)

BASELINE = "asap-home"
"""The comparison run of a spec (the "before" of every saving) and what percentage carbon
caps refer to."""

FORECAST_ERROR_DEFAULT = 0.1
"""Relative error of the ``noisy`` forecast when none is given."""

FLOOR_BUDGET_KG = 1e-3
"""The carbon budget of a floor run (:func:`floor_run`), kg: one gram, never kept, so
every window plans under its budget needs."""

FLOOR_PRICE_PER_KG = 1e6
"""The internal carbon price of a floor run (:func:`floor_run`), currency per kg: carbon
before cost."""

CARBON_FLOOR_LABEL = ("the planner's least carbon at any price, on the forecast made at "
                      "the start, for the jobs known then")
"""How :class:`CarbonFloor` is labelled wherever it is shown."""

_OWN_FIELDS = {"caps": "caps", "carbon_cap_kg": "caps", "power_cap_kw": "caps",
               "restart_s": "sim", "scenario": "the scenario itself"}
"""Knobs that a spec holds in its own fields, not in ``knobs``."""


class SpecError(ValueError):
    """A run spec that cannot run; the message says what to change."""


@dataclass(frozen=True)
class ForecastSettings:
    """What the policy is told about future price and carbon.

    ``mode`` one of :data:`workbench.forecast.FORECAST_MODES`, or None for the honest default
    (:func:`forecast_mode`); ``error`` the relative error of the ``noisy`` forecast (None:
    :data:`FORECAST_ERROR_DEFAULT` for ``noisy``, 0 otherwise); ``model`` the forecaster of
    the ``model`` mode, one of :data:`workbench.forecast.MODELS` (default
    :data:`workbench.forecast.DEFAULT_MODEL`; docs/results.md section 8 says why).
    """

    mode: str | None = None
    error: float | None = None
    model: str = DEFAULT_MODEL

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in FORECAST_MODES:
            raise SpecError(f"unknown forecast mode {self.mode!r}; use one of "
                            f"{', '.join(FORECAST_MODES)}")
        if self.error is not None and not (math.isfinite(self.error) and self.error >= 0):
            raise SpecError(f"forecast error must be a finite number >= 0, got {self.error!r}")
        if self.model not in MODELS:
            raise SpecError(f"unknown forecast model {self.model!r}; use one of "
                            f"{', '.join(MODELS)}")

    @property
    def error_in_effect(self) -> float:
        if self.error is not None:
            return float(self.error)
        return FORECAST_ERROR_DEFAULT if self.mode == "noisy" else 0.0


@dataclass(frozen=True)
class SimSettings:
    """The simulator's settings (see :func:`workbench.sim.simulate`): hidden noise, its seed,
    the seconds lost per restart and per resize, and the online estimates' EMA weight."""

    noise: float = 0.0
    seed: int = 0
    restart_s: float = RESTART_S_DEFAULT
    resize_s: float = RESIZE_S_DEFAULT
    ema_alpha: float = EMA_ALPHA_DEFAULT

    def __post_init__(self) -> None:
        for value, what in ((self.noise, "noise"), (self.restart_s, "restart_s"),
                            (self.resize_s, "resize_s")):
            if not (math.isfinite(value) and value >= 0):
                raise SpecError(f"{what} must be a finite number >= 0, got {value!r}")
        if not 0 < self.ema_alpha <= 1:
            raise SpecError(f"ema_alpha must be in (0, 1], got {self.ema_alpha!r}")


@dataclass(frozen=True)
class RunSpec:
    """Everything that makes a run, parsed once at the edge.

    Attributes
    ----------
    scenario : str
        The scenario's name (the faces load it; :func:`run_spec` checks it is the one given).
    policy : str
        A registered policy (:data:`workbench.policies.POLICY_NAMES`).
    knobs : mapping
        The policy's own knobs (``V``, ``migration_threshold``, ``gpu_counts``, ``solver``,
        ``window_h``...); each must be one the policy takes. Caps and the restart loss have
        their own fields.
    caps : Caps
        Carbon budget and power caps.
    forecast : ForecastSettings
    sim : SimSettings
    baseline : bool
        Also run :data:`BASELINE` (needed anyway for a percentage carbon cap), for the
        saving and its attribution.
    metered : Caps
        Caps the run is metered against without the policy being given them (a comparison
        run under the main run's power caps: its violations are reported).
    ignore : frozenset of str
        Levers (:data:`workbench.supply.LEVERS`: ``supply``, ``demand-charges``,
        ``power-limits``) the policy plans as if they did not exist, while the simulator
        still meters and bills them: what planning with a lever is worth.
    power_limits : tuple of float
        The menu of GPU power limits the policy may choose from, fractions of each GPU's
        maximum board power (:func:`workbench.power_limits.check_menu`). Default
        :data:`~workbench.power_limits.DEFAULT_MENU`, which the slot decision prunes per
        job and slot to full power and the most efficient limit
        (:mod:`workbench.policies.limits`); empty: full power only.
    """

    scenario: str
    policy: str = DEFAULT_POLICY
    knobs: Mapping[str, Any] = field(default_factory=dict)
    caps: Caps = field(default_factory=Caps)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    sim: SimSettings = field(default_factory=SimSettings)
    baseline: bool = True
    metered: Caps = field(default_factory=Caps)
    ignore: frozenset[str] = frozenset()
    power_limits: tuple[float, ...] = DEFAULT_MENU

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "ignore", ignore_set(sorted(self.ignore)))
            object.__setattr__(self, "power_limits", check_menu(self.power_limits)
                               if self.power_limits else ())
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        if self.policy not in POLICY_NAMES:
            raise SpecError(f"unknown policy {self.policy!r}; choose one of "
                            f"{', '.join(POLICY_NAMES)}")
        object.__setattr__(self, "knobs", dict(self.knobs))
        accepted = policy_knobs(self.policy)
        takes = sorted(k for k in accepted if k not in _OWN_FIELDS)
        for knob in self.knobs:
            if knob in _OWN_FIELDS:
                raise SpecError(f"{knob} is set through the spec's {_OWN_FIELDS[knob]}, not "
                                "its knobs")
            if knob not in accepted:
                raise SpecError(f"policy {self.policy!r} takes no knob {knob!r}; its knobs: "
                                f"{', '.join(takes) or 'none'}")
        for what, has in (("carbon", self.caps.has_carbon), ("power", self.caps.has_power)):
            if has and "caps" not in accepted:
                raise SpecError(f"policy {self.policy!r} takes no {what} cap; policies that "
                                f"do: {', '.join(_policies_taking('caps'))}")

    def comparison(self, policy: str) -> RunSpec:
        """The spec of a comparison run: ``policy`` with its default knobs, the same scenario,
        forecast, simulator settings and GPU power-limit menu, metered against the same power
        caps (a baseline does not honour them: their violations are reported)."""
        return RunSpec(scenario=self.scenario, policy=policy, forecast=self.forecast,
                       sim=self.sim, baseline=False, metered=self.caps.metered(),
                       power_limits=self.power_limits)

    def ignoring(self, levers: frozenset[str]) -> RunSpec:
        """The same run planned without ``levers`` (``--ignore``), without a baseline."""
        return replace(self, ignore=frozenset(levers), baseline=False)

    def policy_kwargs(self, caps: Caps) -> dict[str, Any]:
        """The policy's constructor knobs: the spec's knobs, ``caps`` (resolved) and the
        restart loss where the policy takes them."""
        accepted = policy_knobs(self.policy)
        out = dict(self.knobs)
        if "caps" in accepted and (caps.has_carbon or caps.has_limits):
            out["caps"] = caps
        if "restart_s" in accepted:
            out["restart_s"] = self.sim.restart_s
        return out


def _policies_taking(knob: str) -> list[str]:
    return [p for p in POLICY_NAMES if knob in policy_knobs(p)]


@dataclass(frozen=True)
class CarbonFloor:
    """The least carbon the planner reaches at all, told before a capped run
    (:func:`carbon_floor`): the spec's policy under the floor settings (a budget of
    :data:`FLOOR_BUDGET_KG`, an internal carbon price of :data:`FLOOR_PRICE_PER_KG`) run on
    what is known at the start (:func:`known_at_start`: the forecast made then, the jobs
    arrived by then), whole slots, contention, restarts and moves included.

    ``carbon_kg`` and ``cost`` (scenario currency) that run's; ``jobs`` the jobs it planned
    and ``jobs_later`` those that arrive after the start (not in it); ``deadline_misses``
    its misses; ``cpu_s`` the CPU seconds it took (a second simulated run)."""

    carbon_kg: float
    cost: float
    jobs: int
    jobs_later: int
    deadline_misses: int
    cpu_s: float

    @property
    def label(self) -> str:
        return CARBON_FLOOR_LABEL

    def as_dict(self) -> dict[str, Any]:
        """The record as runs store it (``meta["carbon_floor"]``), with its label."""
        return {"carbon_kg": float(self.carbon_kg), "cost": float(self.cost),
                "jobs": int(self.jobs), "jobs_later": int(self.jobs_later),
                "deadline_misses": int(self.deadline_misses), "cpu_s": float(self.cpu_s),
                "label": self.label}


@dataclass
class RunOutcome:
    """What :func:`run_spec` returns.

    ``result`` the run; ``baseline`` the :data:`BASELINE` run (None when the spec asked for
    none); ``bound`` the hindsight bound the policy computed (only the hindsight plan has
    one); ``attribution`` where the saving against the baseline comes from
    (:func:`workbench.metrics.attribute_savings`); ``caps`` the caps the run was given, a
    percentage carbon cap resolved to kg; ``forecast_mode`` the mode decided;
    ``least_carbon`` the least carbon achievable with every deadline met (a hindsight LP
    bound, :func:`least_carbon`), for a run given a carbon budget (None otherwise).
    """

    spec: RunSpec
    result: RunResult
    baseline: RunResult | None
    bound: HindsightBound | None
    attribution: dict[str, dict[str, float]] | None
    caps: Caps
    forecast_mode: str
    least_carbon: LeastCarbon | None = None
    carbon_floor: CarbonFloor | None = None
    """The planner's floor told before the run (:func:`carbon_floor`), for a run given a
    carbon budget by a policy that takes a carbon price (None otherwise)."""
    baseline_run_id: str | None = None
    """The store's id of ``baseline`` when it is a stored run reused (:func:`spec_key`),
    None when it ran now."""

    @property
    def carbon_cap_kg(self) -> float | None:
        return self.caps.carbon_total_kg()

    @property
    def least_carbon_kg(self) -> float | None:
        return None if self.least_carbon is None else self.least_carbon.carbon_kg

    @property
    def carbon_floor_kg(self) -> float | None:
        return None if self.carbon_floor is None else self.carbon_floor.carbon_kg


# -- the forecast, decided once ----------------------------------------------------------
def forecast_mode(spec: RunSpec, scenario: Scenario) -> str:
    """The forecast mode of ``spec`` on ``scenario``: the spec's, else the honest default."""
    return spec.forecast.mode or default_forecast_mode(scenario)


def fit_forecast(scenario: Scenario, mode: str, model: str = DEFAULT_MODEL
                 ) -> ModelForecast | None:
    """The ``model`` forecaster fitted on the scenario's history for mode ``"model"`` (None
    for every other mode): fit once, hand it to every run of the scenario."""
    if mode != "model":
        return None
    from workbench.forecast import fit_scenario

    return fit_scenario(scenario, model)


def _check_fitted(spec: RunSpec, fitted: ModelForecast | None) -> None:
    if fitted is not None and fitted.model != spec.forecast.model:
        raise SpecError(f"the fitted forecast is {fitted.model!r} but the spec asks for "
                        f"{spec.forecast.model!r}: fit it with fit_forecast(scenario, mode, "
                        "spec.forecast.model)")


# -- running -------------------------------------------------------------------------------
def with_scenario_events(spec: RunSpec, scenario: Scenario, *, limits_only: bool = False
                         ) -> RunSpec:
    """``spec`` held to the scenario's own grid events (``[[grid_events]]``) besides its
    own: every run on the scenario meets them. With ``limits_only`` those given as a limit
    in kW alone: a cut (% of the plan's own import) is resolved against the run without it,
    which :func:`run_spec` runs (:func:`event_twin`), not a comparison run.

    An event the spec already holds (the same site, start and hours, as given or resolved)
    is not added again."""
    def key(ev: events.GridEvent) -> tuple[str, Any, float]:
        return ev.datacenter, ev.starts_at(scenario), ev.hours

    held = {key(ev) for ev in spec.caps.events}
    own = [ev for ev in scenario.supply.grid_events if key(ev) not in held
           and (ev.limit_kw is not None or not limits_only)]
    if not own:
        return spec
    return replace(spec, caps=spec.caps.with_events((*own, *spec.caps.events)))


def _check(spec: RunSpec, scenario: Scenario) -> None:
    if spec.scenario != scenario.name:
        raise SpecError(f"the spec names scenario {spec.scenario!r} but was given "
                        f"{scenario.name!r}")
    why = unsuitable(spec.policy, scenario)
    if why is not None:  # refused before any run: it would only repeat another policy
        raise SpecError(why)
    try:
        spec.caps.check_names(d.name for d in scenario.datacenters)
        # Before any run (the baseline's too): a power cap below what the inference
        # services alone draw cannot be kept.
        check_power_caps(scenario, spec.caps, spec.policy)
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def simulate_spec(
    spec: RunSpec, scenario: Scenario, *, caps: Caps | None = None,
    fitted: ModelForecast | None = None, recorders: Sequence[Recorder] = (),
    progress: bool = False,
) -> tuple[RunResult, HindsightBound | None]:
    """Build the spec's policy and simulate it (no baseline); returns the run and the bound.

    ``caps`` overrides ``spec.caps`` (the runner passes them resolved); ``fitted`` is the
    model forecast of :func:`fit_forecast` (fitted here when the mode needs it and none is
    given). The bound is also in ``result.meta["bound"]``, with its figures on equal work
    (:func:`workbench.equal_work.bound_equal_work`).

    Raises
    ------
    SpecError
        For caps naming unknown datacenters, or a percentage cap left unresolved.
    ValueError
        From the policy's own checks of its knobs (the message says which).
    """
    spec = with_scenario_events(spec, scenario, limits_only=True)
    _check(spec, scenario)
    caps = spec.caps if caps is None else caps
    if caps.needs_baseline:
        raise SpecError("a percentage carbon cap needs the baseline: use run_spec")
    cut = [ev.label for ev in caps.events if ev.limit_kw is None]
    if cut:
        raise SpecError(f"grid event {cut[0]}: a cut is of the plan's own import, resolved "
                        "against the run without it: use run_spec (or give limit_kw)")
    mode = forecast_mode(spec, scenario)
    _check_fitted(spec, fitted)
    if fitted is None:
        fitted = fit_forecast(scenario, mode, spec.forecast.model)
    kwargs = spec.policy_kwargs(caps)
    # A hindsight policy plans on the truth less the levers it is to ignore.
    policy: Policy = make_policy(spec.policy, truth=scenario.without(spec.ignore), **kwargs)
    # Stored: the policy's knobs; the simulator adds every cap it meters (those the policy
    # is given, which it also enforces, and those it is only metered against).
    knobs = {k: v for k, v in kwargs.items() if k != "caps"}
    # Grid events are held by the sites whatever the policy knows of them.
    given = caps.has_carbon or caps.has_limits
    result = simulate(
        scenario, policy, forecast_mode=mode, forecast_error=spec.forecast.error_in_effect,
        noise=spec.sim.noise, seed=spec.sim.seed, recorders=recorders, progress=progress,
        restart_s=spec.sim.restart_s, resize_s=spec.sim.resize_s,
        ema_alpha=spec.sim.ema_alpha, knobs=knobs, forecast_model=fitted,
        caps=caps if given else spec.metered, meter_only=not given,
        ignore=spec.ignore, power_limits=spec.power_limits)
    if spec.caps.carbon_pct_below_baseline is not None:
        # The cap as the operator gave it, beside the kg it resolved to: a face that
        # repeats the run shows "10%", not the kg.
        result.meta["carbon_cap_pct"] = float(spec.caps.carbon_pct_below_baseline)
    bound = policy.hindsight_bound()
    if bound is not None:
        result.meta["bound"] = {**bound.as_dict(), **bound_equal_work(bound.as_dict(), scenario)}
    return result, bound


# -- grid events ----------------------------------------------------------------------------
def grid_import_kw(result: RunResult, scenario: Scenario) -> NDArray[np.float64]:
    """A run's metered grid import, kW, (slots, datacenters)."""
    return site_array(result.slots, "grid_import_kw", [d.name for d in scenario.datacenters])


def settle_events(result: RunResult, twin: RunResult, scenario: Scenario, caps: Caps
                  ) -> list[dict[str, Any]]:
    """Report ``result``'s grid events against ``twin`` (the same run without them) in
    ``result.meta["grid_events"]`` (:func:`workbench.events.report`, with each event's
    ``extra_cost``: the run's cost on equal work above the twin's, before the events'
    payments and penalties, shared among the events by the kWh each shed, and
    ``new_misses``: the jobs that
    miss their deadline that the twin meets) and bill their payments and penalties
    (:func:`workbench.events.settle`). A missed event or a new miss is a run warning."""
    names = [d.name for d in scenario.datacenters]
    rows = events.report(scenario, caps.events, grid_import_kw(result, scenario),
                         grid_import_kw(twin, scenario))
    missed = set(_missed(result)) - set(_missed(twin))
    # Work an event moves to another site or past the horizon is paid there: the cost of
    # keeping the events is the fleet's, on equal work, before their payments.
    extra = float(result.metrics["equal_work_cost"]) - float(twin.metrics["equal_work_cost"])
    shed = [max(float(r["shed_kwh"]), 0.0) for r in rows]
    for r, s in zip(rows, shed, strict=True):
        r["extra_cost"] = extra * (s / sum(shed) if sum(shed) > 0 else 1.0 / len(rows))
        r["new_misses"] = sorted(missed)
    events.settle(result.metrics, rows, names)
    result.meta["grid_events"] = rows
    result.metrics["grid_events_met"] = sum(bool(r["met"]) for r in rows)
    result.metrics["grid_events"] = len(rows)
    for r in rows:
        if not r["met"]:
            result.warnings.append(
                f"grid event {r['name']} missed: {r['datacenter']} imported up to "
                f"{r['max_import_kw']:.1f} kW against its {r['limit_kw']:.1f} kW limit "
                f"({r['over_kwh']:.1f} kWh over)")
    if missed:
        result.warnings.append(
            f"keeping the grid events made {len(missed)} job(s) miss a deadline the run "
            f"without them meets: {', '.join(sorted(missed)[:5])}"
            f"{' ...' if len(missed) > 5 else ''}")
    result.meta["log"] = "\n".join(result.warnings)
    return rows


def event_twin(spec: RunSpec, scenario: Scenario, caps: Caps, *,
               fitted: ModelForecast | None = None, recorders: Sequence[Recorder] = ()
               ) -> tuple[Caps, RunResult | None]:
    """For caps with grid events: the events checked against the scenario (a known site, a
    start inside the horizon, a limit above the site's floor), the same run without them
    (the twin: what they cut, a % cut being of its import, shed and cost) and the caps with
    every cut resolved to kW. Without events: ``(caps, None)``. Every face that plans
    events goes through here, then :func:`simulate_spec` with the returned caps and
    :func:`settle_events` against the twin.

    Raises
    ------
    ValueError
        An event the scenario refuses (its message names the event and the numbers);
        SpecError for a limit below what the services alone draw.
    """
    if not caps.has_events:
        return caps, None
    caps = caps.with_events(check_scenario_events(scenario, caps.events, spec.policy))
    twin, _ = simulate_spec(spec, scenario, caps=caps.with_events(()), fitted=fitted,
                            recorders=recorders)
    caps = caps.with_events(events.resolve_cuts(
        scenario, caps.events, grid_import_kw(twin, scenario)))
    try:
        check_power_caps(scenario, caps)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return caps, twin


def _missed(result: RunResult) -> list[str]:
    """The jobs that missed a deadline inside the horizon."""
    jobs = result.jobs
    if jobs is None or jobs.empty:
        return []
    return [str(j) for j, met in zip(jobs["job_id"], jobs["deadline_met"], strict=True)
            if met is not None and met == met and not bool(met)]


# -- carbon budgets -------------------------------------------------------------------------
def least_carbon(spec: RunSpec, scenario: Scenario, caps: Caps) -> LeastCarbon | None:
    """The least carbon achievable on ``scenario`` with every deadline met under the spec's
    power caps and GPU menu (the LP bound of
    :func:`workbench.policies.offline.least_carbon_bound`), for a spec whose policy is
    given a carbon budget; None otherwise (or when ``scenario`` has no job). On the true
    scenario it is hindsight, a yardstick shown after the run; on :func:`known_at_start`
    it is what the operator can know before it."""
    if not caps.has_carbon or "caps" not in policy_knobs(spec.policy) or not scenario.jobs:
        return None
    from workbench.policies.offline import least_carbon_bound

    menu = spec.knobs.get("gpu_counts")
    limits = () if "power-limits" in spec.ignore else spec.power_limits
    return least_carbon_bound(scenario, caps=caps,
                              gpu_counts=tuple(menu) if isinstance(menu, tuple | list) else None,
                              power_limits=limits)


def known_at_start(spec: RunSpec, scenario: Scenario, fitted: ModelForecast | None
                   ) -> Scenario:
    """``scenario`` as the operator knows it before the run: the jobs that have arrived by
    its start, and the horizon's price and carbon as the run's forecast gives them at slot 0
    (:func:`workbench.forecast.forecast`; row 0 is metered, the rest forecast). What a
    decision taken before the run (:func:`run_spec`'s carbon-first switch) may read."""
    from workbench.forecast import forecast
    from workbench.sim.truth import horizon_cube

    cube = horizon_cube(scenario)
    fc = forecast(cube, 0, None, mode=forecast_mode(spec, scenario),
                  error=spec.forecast.error_in_effect, seed=spec.sim.seed, model=fitted)
    told = cube.copy(deep=True)
    regions = [str(r) for r in cube["region"].values]
    for var, values in (("price_per_kwh", fc.price_per_kwh),
                        ("carbon_g_per_kwh", fc.carbon_g_per_kwh)):
        arr = np.asarray(told[var].values, dtype=float).copy()
        for i, r in enumerate(fc.regions):
            arr[:values.shape[0], regions.index(r)] = values[:, i]
        told[var] = (told[var].dims, arr, told[var].attrs)
    jobs = tuple(j for j in scenario.jobs if j.arrival <= scenario.start)
    return replace(scenario, grid=told, jobs=jobs)


def budget_note(cap_kg: float, least: LeastCarbon) -> str | None:
    """What to tell before a run whose carbon budget cannot be kept (None when it can, as
    far as what is known before the run says: ``least`` on :func:`known_at_start`)."""
    if cap_kg >= least.carbon_kg * (1 - 1e-9):
        return None
    return (f"carbon cap {kg_text(cap_kg)} kg cannot be met with every deadline met: the jobs "
            f"known at the start alone need at least {kg_text(least.carbon_kg)} kg on the "
            "forecast made then (an LP bound: no restarts or transfers); the planner "
            "minimises carbon subject to the deadlines")


def takes_floor(policy: str) -> bool:
    """Whether ``policy`` has a floor (:func:`floor_run`): it takes a carbon budget and an
    internal carbon price."""
    knobs = policy_knobs(policy)
    return "caps" in knobs and "carbon_price_per_kg" in knobs


def floor_run(spec: RunSpec, scenario: Scenario, caps: Caps, *,
              fitted: ModelForecast | None = None) -> RunResult:
    """The least carbon ``spec``'s policy reaches at all on ``scenario``: the policy under
    ``caps``' power caps and grid events given in kW, with a carbon budget of
    :data:`FLOOR_BUDGET_KG` (never kept: every window plans under its budget needs and
    cuts to its least carbon) and an internal carbon price of :data:`FLOOR_PRICE_PER_KG`
    (carbon before cost in the window LP and the slot), told what ``spec``'s forecast
    tells. The one computation of the floor: :func:`carbon_floor` runs it on
    :func:`known_at_start`, ``bench/caps_causes.py`` on the truth.

    Raises
    ------
    SpecError
        For a policy without a floor (:func:`takes_floor`).
    """
    if not takes_floor(spec.policy):
        raise SpecError(f"policy {spec.policy!r} has no floor: it takes no carbon price; "
                        f"policies that do: {', '.join(_policies_taking('carbon_price_per_kg'))}")
    held = caps.with_carbon_kg(FLOOR_BUDGET_KG).with_events(
        tuple(ev for ev in caps.events if ev.limit_kw is not None))
    floor = replace(spec, knobs={**spec.knobs, "carbon_price_per_kg": FLOOR_PRICE_PER_KG},
                    caps=held, baseline=False)
    result, _ = simulate_spec(floor, scenario, caps=held, fitted=fitted)
    return result


def carbon_floor(spec: RunSpec, scenario: Scenario, told: Scenario, caps: Caps
                 ) -> CarbonFloor | None:
    """The planner's floor told before a run (:class:`CarbonFloor`): :func:`floor_run` on
    ``told``, ``scenario`` as known at the start (:func:`known_at_start` with the run's
    forecast; the floor run is told that forecast as it is, mode ``perfect`` on it). None
    for a run without a carbon budget, a policy without a floor, or when no job has arrived
    by the start."""
    if not caps.has_carbon or not takes_floor(spec.policy):
        return None
    c0 = time.process_time()
    if not told.jobs:
        return None
    on_told = replace(spec, forecast=ForecastSettings(mode="perfect"), baseline=False)
    result = floor_run(on_told, told, caps)
    m = result.metrics
    return CarbonFloor(carbon_kg=float(m["carbon_kg"]), cost=float(m["cost"]),
                       jobs=len(told.jobs), jobs_later=len(scenario.jobs) - len(told.jobs),
                       deadline_misses=int(m["deadline_misses"]),
                       cpu_s=time.process_time() - c0)


def floor_note(cap_kg: float, floor: CarbonFloor, least: LeastCarbon | None) -> str:
    """The verdict on a carbon budget told before the run, from what is known then: the
    planner's floor ``floor`` (:func:`carbon_floor`) and the least-carbon bound ``least``
    (:func:`least_carbon` on :func:`known_at_start`), both for the jobs known at the
    start::

        cap < bound           cannot be met with every deadline met
        bound <= cap < floor  below what this planner reaches: floor - bound is what whole
                              slots, contention, restarts and moves cost it
        floor <= cap          should be met (later arrivals add to the floor)
    """
    later = f", {floor.jobs_later} arriving later not in it" if floor.jobs_later else ""
    head = (f"carbon floor {kg_text(floor.carbon_kg)} kg ({floor.label}: {floor.jobs} "
            f"job(s){later})")
    bound = None if least is None else least.carbon_kg
    if bound is not None and cap_kg < bound * (1 - 1e-9):
        return (f"{head}; the cap {kg_text(cap_kg)} kg is below the least-carbon bound "
                f"{kg_text(bound)} kg: it cannot be met with every deadline met")
    if cap_kg < floor.carbon_kg:
        gap = "" if bound is None else (
            f" and above the least-carbon bound {kg_text(bound)} kg: the "
            f"{kg_text(floor.carbon_kg - bound)} kg between floor and bound is what whole "
            "slots, contention, restarts and moves cost this planner (the bound pays none)")
        return (f"{head}; the cap {kg_text(cap_kg)} kg is {kg_text(floor.carbon_kg - cap_kg)}"
                f" kg below what this planner reaches{gap}: expect it missed by about "
                f"{kg_text(floor.carbon_kg - cap_kg)} kg")
    unless = (f" unless the {floor.jobs_later} job(s) arriving later need more than its "
              f"{kg_text(cap_kg - floor.carbon_kg)} kg of headroom" if floor.jobs_later else "")
    return f"{head}; the cap {kg_text(cap_kg)} kg is above it: it should be met{unless}"


_CAP_MISSED = "carbon cap missed: "
"""How the simulator's warning of a missed carbon cap begins
(:func:`workbench.sim.results.cap_warnings_after`)."""

def kg_cap_note(cap_kg: float, baseline_kg: float) -> str | None:
    """What to tell before a run whose carbon cap in kg reads like a percentage whose ``%``
    was forgotten: a number in [1, 100) that is less than half the baseline's carbon (a
    cut of more than half). None otherwise."""
    if not (math.isfinite(baseline_kg) and baseline_kg > 0) or not 1 <= cap_kg < 100 \
            or cap_kg >= 0.5 * baseline_kg:
        return None
    return (f"carbon cap {kg_text(cap_kg)} kg is {100 * cap_kg / baseline_kg:.1f}% of "
            f"{BASELINE}'s {kg_text(baseline_kg)} kg, a {100 * (1 - cap_kg / baseline_kg):.1f}% "
            f"cut; a cap of {cap_kg:g}% means a {cap_kg:g}% cut below {BASELINE}")


def budget_verdict(result: RunResult, cap_kg: float, least: LeastCarbon) -> str:
    """After a capped run: its carbon against the cap and the least achievable."""
    used = float(result.metrics["carbon_kg"])
    met = bool(result.metrics.get("carbon_cap_met", used <= cap_kg * (1 + 1e-9)))
    head = (f"carbon cap {kg_text(cap_kg)} kg {'met' if met else 'MISSED'}: "
            f"{kg_text(used)} kg emitted")
    return (f"{head}; least carbon with every deadline met, in hindsight (true grid and "
            f"every arrival), {kg_text(least.carbon_kg)} kg ({least.label})"
            + ("" if met or cap_kg >= least.carbon_kg else ": the cap was below it"))


def _with_verdict(warnings: list[str], result: RunResult, cap_kg: float,
                  least: LeastCarbon) -> list[str]:
    """The run's warnings with the budget's verdict: the simulator's "carbon cap missed"
    line gets the least carbon appended (one warning of one fact, not two), else the
    verdict is added."""
    for i, w in enumerate(warnings):
        if w.startswith(_CAP_MISSED) and cap_kg < least.carbon_kg:
            said = (f"{w}, a cap below the least carbon with every deadline met in "
                    f"hindsight, true grid and every arrival ({kg_text(least.carbon_kg)} kg)")
            return [*warnings[:i], said, *warnings[i + 1:]]
    return [*warnings, budget_verdict(result, cap_kg, least)]


def spec_key(spec: RunSpec, scenario: Scenario, fingerprint: str) -> str:
    """A hash of everything a run of ``spec`` depends on: the scenario's content as stored
    (``fingerprint``, :meth:`workbench.store.Store.scenario_fingerprint`: its jobs, sites,
    supply, the grid series and the profiles), its horizon and slot, the policy and its
    knobs, the caps, the forecast in effect, the simulator's settings, the ignored levers,
    the GPU menu and the workbench's version. Two runs with one key are the same run
    (the simulator is deterministic): ``plan`` reuses a stored baseline of the key
    instead of running and storing another."""
    import hashlib
    import json

    from workbench import __version__

    mode = forecast_mode(spec, scenario)
    error = ForecastSettings(mode, spec.forecast.error).error_in_effect
    # The forecaster only matters where it is used; other modes keep their earlier keys.
    told = [mode, error] + ([spec.forecast.model] if mode == "model"
                            and spec.forecast.model != DEFAULT_MODEL else [])
    what = {
        "fingerprint": fingerprint, "scenario": scenario.name,
        "start": str(scenario.start), "slot_s": scenario.slot_s, "n_slots": scenario.n_slots,
        "policy": spec.policy, "knobs": sorted((k, repr(v)) for k, v in spec.knobs.items()),
        "caps": repr(spec.caps), "metered": repr(spec.metered),
        "forecast": told, "sim": repr(spec.sim), "ignore": sorted(spec.ignore),
        "power_limits": list(spec.power_limits), "version": __version__,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def run_spec(
    spec: RunSpec, scenario: Scenario, *, fitted: ModelForecast | None = None,
    recorders: Sequence[Recorder] = (), baseline_recorders: Sequence[Recorder] = (),
    progress: bool = False, notify: Callable[[str], None] | None = None,
    stored_baseline: tuple[str, RunResult] | None = None,
) -> RunOutcome:
    """Run ``spec`` on ``scenario``: its baseline first (when asked for, or needed by a
    percentage cap), then the policy against the resolved caps; attribute the saving.

    ``recorders`` see the policy's run, ``baseline_recorders`` the baseline's. A policy
    given a carbon budget that what is known before the run (:func:`known_at_start`) says
    cannot be kept minimises carbon subject to the deadlines (``carbon_first``), and
    ``notify`` (e.g. the CLI's stderr) hears so before the policy runs
    (:func:`budget_note`). After the run the least carbon achievable in hindsight is beside
    it as a labelled yardstick (:func:`least_carbon`, in ``meta["least_carbon"]``) with the
    run's verdict (:func:`budget_verdict`); no decision reads it.

    ``stored_baseline`` ``(run_id, result)``: a stored run of the spec's comparison with the
    same :func:`spec_key`, used instead of running the baseline again (and not stored
    again, :func:`save_outcome`).
    """
    spec = with_scenario_events(spec, scenario)
    _check(spec, scenario)
    mode = forecast_mode(spec, scenario)
    _check_fitted(spec, fitted)
    if fitted is None:
        fitted = fit_forecast(scenario, mode, spec.forecast.model)
    base: RunResult | None = None
    base_id: str | None = None
    if (spec.baseline or spec.caps.needs_baseline) and stored_baseline is not None:
        base_id, base = stored_baseline
    elif spec.baseline or spec.caps.needs_baseline:
        base, _ = simulate_spec(spec.comparison(BASELINE), scenario, fitted=fitted,
                                recorders=baseline_recorders, progress=progress)
    caps = spec.caps.resolved(None if base is None else float(base.metrics["carbon_kg"]))
    if base is not None and spec.caps.carbon_kg is not None:
        looks_like_pct = kg_cap_note(spec.caps.carbon_kg, float(base.metrics["carbon_kg"]))
        if looks_like_pct is not None:
            # Told before the policy runs (a forgotten % costs a whole run), once: the
            # CLI prints what it is notified of and drops run-warning log records.
            log.warning(looks_like_pct, extra=RUN_WARNING)
            if notify is not None:
                notify(looks_like_pct)
    cap_kg = caps.carbon_total_kg()
    at_start = known_at_start(spec, scenario, fitted) if cap_kg is not None else None
    known = least_carbon(spec, at_start, caps) if at_start is not None else None
    note = None if known is None or cap_kg is None else budget_note(cap_kg, known)
    # The planner's floor, told before the run from what is known then (no hindsight).
    floor = carbon_floor(spec, scenario, at_start, caps) if at_start is not None else None
    floor_said = None if floor is None or cap_kg is None else floor_note(cap_kg, floor, known)
    if floor is not None and cap_kg is not None and cap_kg < floor.carbon_kg:
        # Out of this planner's reach: a warning (with the bound's, when below it too).
        note = floor_said if note is None else f"{note}; {floor_said}"
    run = spec
    if note is not None:
        log.warning(note, extra=RUN_WARNING)
        if notify is not None:
            notify(note)
        if "carbon_first" in policy_knobs(spec.policy) and "carbon_first" not in spec.knobs:
            # The budget cannot be kept: minimise carbon subject to the deadlines.
            run = replace(spec, knobs={**spec.knobs, "carbon_first": True})
    caps, twin = event_twin(run, scenario, caps, fitted=fitted)
    result, bound = simulate_spec(run, scenario, caps=caps, fitted=fitted,
                                  recorders=recorders, progress=progress)
    if twin is not None:
        settle_events(result, twin, scenario, caps)
    least = least_carbon(spec, scenario, caps) if cap_kg is not None else None
    if floor is not None:
        result.meta["carbon_floor"] = {**floor.as_dict(), "note": floor_said}
    if least is not None and cap_kg is not None:
        result.meta["least_carbon"] = least.as_dict()
        if note is not None or cap_kg < least.carbon_kg * (1 - 1e-9):
            told = [note, *result.warnings] if note is not None else list(result.warnings)
            result.warnings[:] = _with_verdict(told, result, cap_kg, least)
            result.meta["log"] = "\n".join(result.warnings)
    attribution = (attribute_savings(result, base, scenario)
                   if base is not None and spec.baseline and spec.policy != BASELINE else None)
    if attribution is not None:
        result.meta["attribution"] = attribution
    return RunOutcome(spec=spec, result=result, baseline=base if spec.baseline else None,
                      bound=bound, attribution=attribution, caps=caps, forecast_mode=mode,
                      least_carbon=least, carbon_floor=floor,
                      baseline_run_id=base_id if spec.baseline else None)


STRONGEST_CANDIDATES: tuple[str, ...] = (
    "greedy", "cheapest-at-arrival", "wait-for-cheap", "carbon-scaling", "goodput-only",
    "follow-renewables", "power-limit-only")
"""The comparison policies that plan without hindsight and without a window model of the
future (rules and greedy choices): among them :func:`strongest_baseline` finds the one an
operator would otherwise run."""


def strongest_baseline(spec: RunSpec, scenario: Scenario, *,
                       fitted: ModelForecast | None = None,
                       candidates: Sequence[str] = STRONGEST_CANDIDATES
                       ) -> RunResult | None:
    """The strongest comparison that plans without hindsight: each of ``candidates`` (but
    the spec's own policy) run as a comparison of ``spec`` (:meth:`RunSpec.comparison`: the
    same forecast, simulator settings and metered caps), the one whose part of the bill on
    equal work is the least, ties to the fewer deadline misses; None when none can run (a
    policy that refuses the scenario, e.g. one that follows own renewables on a site
    without any, is left out). Not stored: a reference beside the saving."""
    best: RunResult | None = None
    for name in candidates:
        if name == spec.policy:
            continue
        try:
            res, _ = simulate_spec(spec.comparison(name), scenario, fitted=fitted)
        except (SpecError, ValueError) as exc:
            log.debug("strongest baseline: %s left out (%s)", name, exc)
            continue
        key = (float(res.metrics["equal_work_cost"]), int(res.metrics["deadline_misses"]))
        if best is None or key < (float(best.metrics["equal_work_cost"]),
                                  int(best.metrics["deadline_misses"])):
            best = res
    return best


def save_outcome(outcome: RunOutcome, db: str | Path, *, wait_s: float | None = None,
                 baseline_key: str | None = None) -> SavedRuns:
    """Store the run and its baseline together, in one transaction (a run killed midway
    stores nothing); the run records its baseline's id and its bound. A baseline reused
    from the store (``outcome.baseline_run_id``) is not stored again; a new one is stored
    with ``baseline_key`` (its :func:`spec_key`, in its settings) for later runs to reuse.

    A store locked by another process is retried for ``wait_s`` seconds, then the runs go
    to a side file (:func:`workbench.recorders.save_results`).
    """
    to_store: list[tuple[RunResult, dict[str, Any]]] = []
    mine: dict[str, Any] = {}
    if outcome.baseline_run_id is not None:  # a stored baseline reused: not stored again
        mine["baseline_run_id"] = outcome.baseline_run_id
    elif outcome.baseline is not None:
        base_id = uuid.uuid4().hex[:12]
        extra: dict[str, Any] = {"status": "baseline", "run_id": base_id}
        if baseline_key is not None:
            extra["spec_key"] = baseline_key
        to_store.append((outcome.baseline, extra))
        mine["baseline_run_id"] = base_id
    to_store.append((outcome.result, mine))
    return save_results(db, to_store, wait_s=LOCK_WAIT_S if wait_s is None else wait_s)


__all__ = [
    "BASELINE",
    "CARBON_FLOOR_LABEL",
    "FLOOR_BUDGET_KG",
    "FLOOR_PRICE_PER_KG",
    "FORECAST_ERROR_DEFAULT",
    "CarbonFloor",
    "ForecastSettings",
    "RunOutcome",
    "RunSpec",
    "SimSettings",
    "SpecError",
    "budget_note",
    "budget_verdict",
    "carbon_floor",
    "event_twin",
    "fit_forecast",
    "floor_note",
    "floor_run",
    "least_carbon",
    "forecast_mode",
    "run_spec",
    "save_outcome",
    "settle_events",
    "simulate_spec",
    "spec_key",
    "takes_floor",
    "with_scenario_events",
]
