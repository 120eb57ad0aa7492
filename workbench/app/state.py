"""The app's state: one param-based object per browser session.

:class:`WorkbenchState` holds the scenario, the policy and its knobs (as parameters, so that
widgets are made from them), and the latest run. It knows nothing about widgets: views read
it, tests drive it directly. A run is split into :meth:`WorkbenchState.compute` (pure work,
safe in a worker thread: it only touches the progress counter) and
:meth:`WorkbenchState.apply` (publishes the outcome); :meth:`WorkbenchState.run_async` runs the
first in a thread pool so that the server's event loop, and every other session, stays
responsive.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import param

from workbench import scenarios
from workbench.cubes import FORECAST_MODES, CubeError, resample
from workbench.metrics import attribute_savings
from workbench.model import Scenario, ScenarioError
from workbench.policies import POLICY_NAMES, make_policy, policy_knobs
from workbench.quote import JobSpec, Quote, quote
from workbench.sim import AllocationError, RunResult, SlotRecord, simulate
from workbench.store import Store, StoreError

log = logging.getLogger(__name__)

V_STEPS: tuple[float, ...] = (
    0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
)
"""Values of the log-scale V slider."""

GPU_COUNT_CHOICES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
SLOT_MINUTES: tuple[int, ...] = (15, 30, 60)
CAP_MODES: tuple[str, ...] = ("none", "global", "per datacenter")
BASELINES: tuple[str, ...] = tuple(
    n for n in POLICY_NAMES if n not in ("lyapunov", "greedy")
)
"""Policies the run is compared with in the Metrics tab (the hindsight plan included)."""



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

_RUN_ERRORS = (ValueError, RuntimeError, ScenarioError, StoreError, CubeError, AllocationError)
"""What a run may raise for a bad input, an infeasible cap or a solver failure; shown to the
user as a message (anything else is a bug and propagates)."""


class _Progress:
    """A recorder that reports each finished slot to a callback (from the worker thread)."""

    def __init__(self, callback: Callable[[int], None]) -> None:
        self._callback = callback

    def start(self, run_meta: Mapping[str, Any]) -> None:  # noqa: ARG002
        return None

    def record(self, slot_record: SlotRecord) -> None:  # noqa: ARG002
        self._callback(1)

    def finish(self, result: RunResult) -> None:  # noqa: ARG002
        return None


HONEST_FORECAST = "default (honest)"
"""The Forecast choice that runs :func:`workbench.cubes.default_forecast_mode`."""


@dataclass
class RunOutcome:
    """What :meth:`WorkbenchState.compute` returns: a result, or an error, and notes."""

    result: RunResult | None
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str = ""
    notes: list[str] = field(default_factory=list)
    run_id: str | None = None


class WorkbenchState(param.Parameterized):
    """Scenario, knobs and the latest run of one app session.

    Parameters are the sidebar's inputs; ``result``, ``baselines``, ``message`` and the
    progress counters are outputs that views watch.
    """

    db_path = param.String(default="workbench.duckdb", doc="DuckDB store file")
    scenario_name: param.Selector[str | None] = param.Selector(
        default=None, objects=[], label="Scenario")
    policy: param.Selector[str] = param.Selector(
        default="lyapunov", objects=list(POLICY_NAMES), label="Policy")
    V = param.Number(default=DEFAULT_V, bounds=(1e-3, 1e5), label="V (cost weight)")
    cap_mode: param.Selector[str] = param.Selector(
        default="none", objects=list(CAP_MODES), label="Carbon cap")
    carbon_cap_kg = param.Number(default=1000.0, bounds=(1e-6, None),
                                 label="Global carbon cap (kg over the horizon)")
    carbon_caps_kg = param.Dict(default={}, doc="Carbon cap per datacenter, kg over the horizon")
    gpu_counts = param.ListSelector(default=[], objects=list(GPU_COUNT_CHOICES),
                                    label="GPU-count menu (empty: each job's own)")
    migration_threshold = param.Number(default=DEFAULT_MIGRATION_THRESHOLD, bounds=(0.0, None),
                                       softbounds=(0.0, 1.0), step=0.01,
                                       label="Migration threshold")
    slot_minutes: param.Selector[int] = param.Selector(
        default=15, objects=list(SLOT_MINUTES), label="Slot (min)")
    forecast_mode: param.Selector[str] = param.Selector(
        default=HONEST_FORECAST, objects=[HONEST_FORECAST, *FORECAST_MODES], label="Forecast",
        doc="what policies are told of future prices; 'perfect' is a what-if")
    forecast_error = param.Number(default=0.1, bounds=(0.0, 2.0), label="Forecast error")
    baseline_policies = param.ListSelector(default=list(BASELINES), objects=list(BASELINES),
                                           label="Compare with")
    save_runs = param.Boolean(default=True, label="Save runs in the store")

    scenario = param.ClassSelector(class_=Scenario, default=None, allow_None=True,
                                   doc="The scenario as loaded (its own slot length)")
    result = param.ClassSelector(class_=RunResult, default=None, allow_None=True)
    baselines = param.Dict(default={}, doc="policy -> metrics of the comparison runs")
    tradeoff = param.DataFrame(default=None, allow_None=True,
                               doc="V sweep of the scenario from the store")
    last_quote = param.ClassSelector(class_=Quote, default=None, allow_None=True)
    running = param.Boolean(default=False)
    progress = param.Integer(default=0, bounds=(0, None))
    progress_max = param.Integer(default=1, bounds=(1, None))
    stage = param.String(default="", doc="What the running computation is doing now")
    message = param.String(default="")
    message_kind: param.Selector[str] = param.Selector(default="info",
                                  objects=["info", "success", "warning", "danger"])
    runs_done = param.Integer(default=0, doc="Completed runs in this session")
    store_error = param.String(default="", doc="Why the store could not be read or written "
                               "the last time (e.g. locked by another process); empty when "
                               "the last access worked")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._baseline_cache: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._baseline_plans: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()
        self._done = 0
        self.refresh_scenarios()

    # -- scenario ------------------------------------------------------------------------
    def refresh_scenarios(self) -> None:
        """Offer the store's scenarios and the built-in ones; keep the current choice."""
        names: list[str] = []
        try:
            with Store(self.db_path) as store:
                names = store.scenario_names()
            self.store_error = ""
        except StoreError as exc:
            self._store_failed(exc, "the store's scenarios are not listed")
        names = sorted(set(names) | set(scenarios.builtin_names()))
        self.param.scenario_name.objects = names
        if self.scenario_name not in names:
            self.scenario_name = names[0] if names else None
        elif self.scenario is None:
            self._load_scenario()

    @param.depends("scenario_name", watch=True)
    def _load_scenario(self) -> None:
        name = self.scenario_name
        if name is None:
            return
        try:
            with Store(self.db_path) as store:
                if store.has_scenario(name):
                    scenario = store.load_scenario(name)
                else:
                    scenario = scenarios.build_builtin(name)
                    store.save_scenario(scenario)
        except StoreError as exc:
            self._store_failed(exc, f"cannot load scenario {name!r}")
            return
        except (ScenarioError, CubeError, KeyError) as exc:
            self.say(f"cannot load scenario {name!r}: {exc}", "danger")
            return
        self.store_error = ""
        self.param.update(scenario=scenario, result=None, baselines={})
        if set(self.carbon_caps_kg) != {d.name for d in scenario.datacenters}:
            self.carbon_caps_kg = {d.name: self.carbon_cap_kg / len(scenario.datacenters)
                                   for d in scenario.datacenters}
        self.refresh_tradeoff()
        self.say(f"scenario {name}: {len(scenario.jobs)} jobs, {scenario.n_slots} slots of "
                  f"{scenario.slot_s // 60} min", "info")

    def planning_scenario(self) -> Scenario:
        """The loaded scenario at the chosen slot length (its cube resampled)."""
        sc = self.scenario
        if sc is None:
            if self.store_error:
                raise ScenarioError(f"no scenario loaded: {self.store_error}")
            raise ScenarioError("no scenario loaded; pick one in the sidebar")
        slot_s = int(self.slot_minutes) * 60
        if slot_s == sc.slot_s:
            return sc
        horizon_s = sc.slot_s * sc.n_slots
        if horizon_s % slot_s:
            raise ScenarioError(f"the horizon ({horizon_s / 3600:g} h) is not a whole number "
                                f"of {self.slot_minutes}-min slots; pick another slot length")
        return dataclasses.replace(sc, grid=resample(sc.grid, slot_s), slot_s=slot_s,
                                   n_slots=horizon_s // slot_s)

    # -- knobs ---------------------------------------------------------------------------
    def knobs(self, policy: str | None = None) -> dict[str, Any]:
        """The sidebar's knobs that ``policy`` (default: the selected one) accepts."""
        name = policy or self.policy
        wanted: dict[str, Any] = {"V": float(self.V),
                                  "migration_threshold": float(self.migration_threshold)}
        if self.cap_mode == "global":
            wanted["carbon_cap_kg"] = float(self.carbon_cap_kg)
        elif self.cap_mode == "per datacenter":
            wanted["carbon_cap_kg"] = {k: float(v) for k, v in self.carbon_caps_kg.items()}
        if self.gpu_counts:
            wanted["gpu_counts"] = tuple(sorted(int(n) for n in self.gpu_counts))
        accepted = policy_knobs(name)
        return {k: v for k, v in wanted.items() if k in accepted}

    def _settings(self) -> dict[str, Any]:
        return {"forecast_mode": None if self.forecast_mode == HONEST_FORECAST
                else self.forecast_mode,
                "forecast_error": float(self.forecast_error) if self.forecast_mode == "noisy"
                else 0.0}

    # -- running -------------------------------------------------------------------------
    def compute(self) -> RunOutcome:
        """Run the selected policy, then the comparison policies not yet cached.

        Touches no parameter but ``progress``/``progress_max``: safe in a worker thread.
        Errors a user can fix come back in :attr:`RunOutcome.error`.
        """
        try:
            sc = self.planning_scenario()
            knobs = self.knobs()
            policy = make_policy(self.policy, truth=sc, **knobs)
        except _RUN_ERRORS as exc:
            return RunOutcome(result=None, error=f"bad input: {exc}")
        settings = self._settings()
        key_base = (sc.name, sc.slot_s, sc.n_slots, settings["forecast_mode"],
                    settings["forecast_error"])
        todo = [b for b in self.baseline_policies
                if b != self.policy and (*key_base, b) not in self._baseline_cache]
        self._done = 0
        self.param.update(progress=0, progress_max=max(sc.n_slots * (1 + len(todo)), 1),
                          stage=f"running {self.policy} over {sc.n_slots} slots")
        tick = _Progress(self._tick)
        notes: list[str] = []
        try:
            result = simulate(sc, policy, recorders=[tick],
                              knobs={**knobs, "slot_s": sc.slot_s}, **settings)
        except _RUN_ERRORS as exc:
            return RunOutcome(result=None, error=f"{self.policy} failed: {exc}")
        bound = getattr(policy, "bound", None)
        if bound:
            result.meta["bound"] = dict(bound)
        baselines: dict[str, dict[str, Any]] = {}
        for i, name in enumerate(todo, 1):
            self.stage = f"comparison {i}/{len(todo)}: {name} (cached for this session)"
            try:
                base = simulate(sc, make_policy(name, truth=sc), recorders=[tick], **settings)
            except _RUN_ERRORS as exc:
                notes.append(f"baseline {name} unavailable: {exc}")
                continue
            self._baseline_cache[(*key_base, name)] = base.metrics
            self._baseline_plans[(*key_base, name)] = base.plan
        asap_plan = self._baseline_plans.get((*key_base, "asap-home"))
        if asap_plan is not None and self.policy != "asap-home":
            # Where the saving comes from, for the Metrics tab's waterfall.
            result.meta["attribution"] = attribute_savings(result, {"plan": asap_plan}, sc)
        for name in self.baseline_policies:
            if name != self.policy and (*key_base, name) in self._baseline_cache:
                baselines[name] = self._baseline_cache[(*key_base, name)]
        run_id = None
        if self.save_runs:
            try:
                with Store(self.db_path) as store:
                    run_id = store.save_run(result.meta, result.plan, result.migrations,
                                            result.slots, result.metrics)
            except StoreError as exc:
                notes.append(f"run not saved: {exc}")
                self.store_error = f"run not saved: {exc}"
        return RunOutcome(result=result, baselines=baselines, notes=notes, run_id=run_id)

    def _tick(self, n: int) -> None:
        """Count finished slots; publish ``progress`` only when it moves by 1 % of the total.

        Every published change is a message to the browser: thousands of them (one per slot
        and policy) would swamp the session and slow the run down severalfold.
        """
        with self._lock:
            self._done = min(self._done + n, self.progress_max)
            step = max(self.progress_max // 100, 1)
            if self._done - self.progress >= step or self._done == self.progress_max:
                self.progress = self._done

    def apply(self, outcome: RunOutcome) -> None:
        """Publish an outcome; on error keep the previous results and show the message."""
        if outcome.result is None:
            self.say(outcome.error, "danger")
            return
        res = outcome.result
        m = res.metrics
        self.param.update(result=res, baselines=outcome.baselines,
                          runs_done=self.runs_done + 1)
        self.refresh_tradeoff()
        warnings = [*outcome.notes, *res.warnings]
        text = (f"{res.policy}: cost {m['cost']:.2f} {m.get('currency', '')}, carbon "
                f"{m['carbon_kg']:.1f} kg, {m['deadline_misses']} deadline misses, "
                f"{m['migrations']} migrations")
        if warnings:
            shown = "; ".join(warnings[:3]) + (f" (+{len(warnings) - 3} more)"
                                               if len(warnings) > 3 else "")
            self.say(f"{text}. Warnings: {shown}", "warning")
        else:
            self.say(text, "success")

    def run(self) -> RunResult | None:
        """Run synchronously (tests, notebooks); returns the new result or None on error."""
        self.running = True
        try:
            outcome = self.compute()
        finally:
            self.running = False
        self.apply(outcome)
        return outcome.result

    async def run_async(self) -> RunResult | None:
        """Run in a worker thread; the event loop keeps serving this and other sessions."""
        if self.running:
            return None
        self.running = True
        try:
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(None, self.compute)
        finally:
            self.running = False
        self.apply(outcome)
        return outcome.result

    # -- derived -------------------------------------------------------------------------
    def refresh_tradeoff(self) -> None:
        """Read the V trade-off of this scenario's Lyapunov runs from the store."""
        from workbench.app.derive import tradeoff_frame

        if self.scenario is None:
            self.tradeoff = None
            return
        try:
            with Store(self.db_path) as store:
                runs = store.runs(self.scenario.name)
                runs = runs[runs["policy"] == "lyapunov"]
                metrics = {rid: store.run_metrics(rid) for rid in runs["run_id"]}
        except StoreError as exc:
            self._store_failed(exc, "the V trade-off of stored runs is not shown")
            self.tradeoff = None
            return
        frame = tradeoff_frame(runs, metrics)
        self.tradeoff = frame if len(frame) >= 2 else None

    def quote(self, spec: JobSpec, *, carbon_price_per_kg: float = 0.0,
              respect_plan: bool = False) -> Quote | None:
        """Quote a job against the planning scenario (and the latest plan's occupancy)."""
        try:
            sc = self.planning_scenario()
            occupancy = (self.result.slots if respect_plan and self.result is not None
                         and self.result.meta.get("slot_s") == sc.slot_s else None)
            q = quote(sc, spec, carbon_price_per_kg=carbon_price_per_kg,
                      occupancy=occupancy, **self._settings())
        except _RUN_ERRORS as exc:
            self.say(f"quote failed: {exc}", "danger")
            return None
        self.last_quote = q
        best = q.recommended
        if best is None:
            self.say("quote: no option finishes before the deadline", "warning")
        else:
            self.say(f"quote: {best['datacenter']} {best['n_gpus']}x{best['gpu_type']} from "
                      f"{best['start']:%Y-%m-%d %H:%M} UTC, {best['cost']:.2f} "
                      f"{q.currency}", "success")
        return q

    def _store_failed(self, exc: StoreError, consequence: str) -> None:
        """Keep a store problem on screen (``store_error``, the sidebar's red box) and in
        the message box; the log has it too."""
        self.store_error = f"{exc} ({consequence}; press Reload store when it is free)"
        self.say(f"{consequence}: {exc}", "danger")

    def say(self, text: str, kind: str = "info") -> None:
        """Show ``text`` in the sidebar's message box (``kind``: info, success, warning,
        danger); views use it for errors of their own inputs."""
        if kind == "danger":
            log.warning("%s", text)
        self.param.update(message=text, message_kind=kind)


def horizon_hours(scenario: Scenario) -> float:
    """Length of the scenario's horizon, hours."""
    return scenario.slot_s * scenario.n_slots / 3600.0


def median_work(scenario: Scenario, app: str) -> float:
    """Median ``work_samples`` of the scenario's training jobs of ``app`` (NaN if none)."""
    works = [j.work_samples for j in scenario.jobs if j.is_training and j.app == app]
    return float(pd.Series(works).median()) if works else math.nan
