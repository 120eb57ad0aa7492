"""The app's state: one param-based object per browser session.

:class:`WorkbenchState` holds the scenario, the policy and its knobs (as parameters, so that
widgets are made from them; their rules in :mod:`workbench.app.knobs`), the shown run and the
stored runs. It knows nothing about widgets: views read it, tests drive it directly. A run is
split into :meth:`WorkbenchState.compute` (the sidebar parsed into a
:class:`~workbench.app.running.RunRequest`, run by :mod:`workbench.app.running`: safe in a
worker thread, it only touches the progress parameters) and :meth:`WorkbenchState.apply`
(publishes the outcome); :meth:`WorkbenchState.run_async` runs the first in a thread pool so
that the server's event loop, and every other session, stays responsive. What the sessions
of a server share lives in a :class:`~workbench.app.shared.SharedCache`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pandas as pd
import param

from workbench import runs as stored_runs
from workbench import scenarios
from workbench.app.knobs import (
    BASELINES,
    CAP_MODES,
    DEFAULT_MIGRATION_THRESHOLD,
    DEFAULT_V,
    GPU_COUNT_CHOICES,
    HONEST_FORECAST,
    SLOT_MINUTES,
    check_cap,
    check_knob,
    restored_knobs,
)
from workbench.app.running import (
    RUN_ERRORS,
    RunOutcome,
    RunProgress,
    RunRequest,
    SessionPublisher,
    run_with_comparisons,
)
from workbench.app.shared import SERVER_CACHE, ComparisonKey, SharedCache
from workbench.caps import Caps
from workbench.cubes import CubeError
from workbench.events import GridEvent
from workbench.flexibility import Envelope, start_slots
from workbench.flexibility import offers as envelope_offers
from workbench.forecast import DEFAULT_MODEL, FORECAST_MODES, MODELS
from workbench.model import Scenario, ScenarioError
from workbench.policies import DEFAULT_POLICY, POLICY_NAMES, policy_knobs, unsuitable
from workbench.power_limits import DEFAULT_MENU
from workbench.quote import JobSpec, Quote, quote
from workbench.runner import ForecastSettings, RunSpec
from workbench.sim import RunResult
from workbench.store import Store, StoreError

log = logging.getLogger(__name__)


class WorkbenchState(param.Parameterized):
    """Scenario, knobs and the latest run of one app session.

    Parameters are the sidebar's inputs; ``result``, ``baselines``, ``message`` and the
    progress counters are outputs that views watch.
    """

    db_path = param.String(default="workbench.duckdb", doc="DuckDB store file")
    scenario_name: param.Selector[str | None] = param.Selector(
        default=None, objects=[], label="Scenario")
    policy: param.Selector[str] = param.Selector(
        default=DEFAULT_POLICY, objects=list(POLICY_NAMES), label="Policy")
    V = param.Number(default=DEFAULT_V, label="V (cost weight)",
                     doc="Checked by check_knob where typed (a bound here would make a widget "
                     "revert silently)")
    cap_mode: param.Selector[str] = param.Selector(
        default="none", objects=list(CAP_MODES), label="Carbon cap")
    carbon_cap_kg = param.Number(default=1000.0,
                                 label="Global carbon cap (kg over the horizon)")
    carbon_cap_pct = param.Number(default=None, allow_None=True,
                                  doc="The global carbon cap as a percentage below asap-home's "
                                  "carbon (resolved when the run starts); None: the cap is "
                                  "carbon_cap_kg")
    carbon_caps_kg = param.Dict(default={}, doc="Carbon cap per datacenter, kg over the horizon")
    gpu_counts = param.ListSelector(default=[], objects=list(GPU_COUNT_CHOICES),
                                    label="GPU-count menu (empty: each job's own)")
    migration_threshold = param.Number(default=DEFAULT_MIGRATION_THRESHOLD,
                                       softbounds=(0.0, 1.0), step=0.01,
                                       label="Migration threshold")
    slot_minutes: param.Selector[int] = param.Selector(
        default=15, objects=list(SLOT_MINUTES), label="Slot (min)")
    forecast_mode: param.Selector[str] = param.Selector(
        default=HONEST_FORECAST, objects=[HONEST_FORECAST, *FORECAST_MODES], label="Forecast",
        doc="what policies are told of future prices; 'perfect' is a what-if")
    forecast_error = param.Number(default=0.1, label="Forecast error")
    forecast_model: param.Selector[str] = param.Selector(
        default=DEFAULT_MODEL, objects=list(MODELS), label="Forecast model",
        doc="the forecaster of the 'model' forecast (docs/results.md section 8)")
    power_limits = param.Boolean(
        default=True, label="GPU power limits",
        doc="plan with the default menu of GPU power limits (off: full power only)")
    baseline_policies = param.ListSelector(default=list(BASELINES), objects=list(BASELINES),
                                           label="Compare with")
    save_runs = param.Boolean(default=True, label="Save runs in the store")

    scenario = param.ClassSelector(class_=Scenario, default=None, allow_None=True,
                                   doc="The scenario as loaded (its own slot length)")
    result = param.ClassSelector(class_=RunResult, default=None, allow_None=True)
    baselines = param.Dict(default={}, doc="policy -> metrics of the comparison runs")
    bound = param.Dict(default={}, doc="The hindsight bound the shown run is measured "
                       "against (its own, else its stored offline comparison's), with its "
                       "equal-work figures; empty when none was computed")
    tradeoff = param.DataFrame(default=None, allow_None=True,
                               doc="V sweep of the scenario from the store")
    last_quote = param.ClassSelector(class_=Quote, default=None, allow_None=True)
    flex_hours = param.Number(default=3.0, label="Event hours",
                              doc="How long each offered event lasts (checked by "
                              "compute_offers: in (0, 168])")
    flex_notice_h = param.Number(default=2.0, label="Notice (h)",
                                 doc="Hours of notice of each offered event (checked by "
                                 "compute_offers: in [0, 168])")
    flex_site = param.String(default="", doc="Only this datacenter's offers (empty: every "
                             "site; workbench flexibility --datacenter)")
    offers = param.DataFrame(default=None, allow_None=True,
                             doc="The flexibility envelope's offers of the run named in "
                             "offers_from (workbench.flexibility.OFFER_COLUMNS)")
    offers_from = param.Dict(default={}, doc="The run the offers are read off: run_id, "
                             "label, policy, slot_s; and hours, notice_hours")
    flex_pick = param.Dict(default={}, doc="The chosen offer: datacenter, start (ISO, UTC)")
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

    input_errors = param.Dict(default={}, doc="knob -> why what was typed is refused")
    run_info = param.Dict(default={}, doc="The shown run: run_id, name, created_utc, "
                          "policy, scenario, knobs, settings (as stored)")
    runs_table = param.DataFrame(default=None, allow_None=True,
                                 doc="Stored runs of the scenario (Store.run_summaries)")
    compare_ids = param.List(default=[], doc="Runs ticked for side-by-side comparison")
    progress_rows = param.List(default=[], doc="Per policy: policy, done, total, started_s, "
                               "finished_s (time.monotonic; None while running)")
    tz: param.Selector[str] = param.Selector(default="UTC", objects=["UTC"], label="Times in",
                        doc="One time zone for every tab")

    def __init__(self, shared: SharedCache | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.shared = SERVER_CACHE if shared is None else shared
        """What this session shares with the server's other sessions."""
        self.closed = False
        """True once the browser session is gone (:meth:`close_session`)."""
        self.publisher = SessionPublisher(self.param.update, lambda: not self.closed)
        """Where the worker thread's progress goes (at once, or deferred when served)."""
        self.run_progress = RunProgress(self.publisher)
        """The running computation's progress (it publishes the progress parameters)."""
        self._open: dict[int, Store] = {}
        self.envelope: Envelope | None = None
        """The flexibility envelope the offers were read from (:meth:`compute_offers`)."""
        self.fingerprint = ""
        """:meth:`Store.scenario_fingerprint` of the loaded scenario (keys the comparison
        runs shared between sessions)."""
        self.refresh_scenarios()

    @contextmanager
    def store(self) -> Iterator[Store]:
        """The store, opened once for a chain of reads on this thread (a session's first
        page reads it five times; each DuckDB open costs ~0.1 s): nested uses share it."""
        me = threading.get_ident()
        if me in self._open:
            yield self._open[me]
            return
        with Store(self.db_path) as opened:
            self._open[me] = opened
            try:
                yield opened
            finally:
                del self._open[me]

    # -- scenario ------------------------------------------------------------------------
    def refresh_scenarios(self) -> None:
        """Offer the store's scenarios and the built-in ones; keep the current choice, else
        open the scenario of the newest stored run (of any scenario)."""
        try:
            with self.store() as store:
                self.store_error = ""
                # Loading the scenario and its latest run reads the same open store.
                self._offer_scenarios(store.scenario_names(), stored_runs.newest_scenario(store))
                return
        except StoreError as exc:
            self._store_failed(exc, "the store's scenarios are not listed")
        self._offer_scenarios([])

    def _offer_scenarios(self, stored: list[str], latest: str | None = None) -> None:
        names = sorted(set(stored) | set(scenarios.builtin_names()))
        self.param.scenario_name.objects = names
        if self.scenario_name not in names:
            first = latest if latest in names else (names[0] if names else None)
            self.scenario_name = first
        elif self.scenario is None:
            self._load_scenario()

    @param.depends("scenario_name", watch=True)
    def _load_scenario(self) -> None:
        name = self.scenario_name
        if name is None:
            return
        try:
            with self.store() as store:
                scenario, self.fingerprint = self.shared.scenario(self.db_path, name, store)
                self._show_scenario(scenario)
        except StoreError as exc:
            self._store_failed(exc, f"cannot load scenario {name!r}")
            return
        except (ScenarioError, CubeError, KeyError) as exc:
            self.say(f"cannot load scenario {name!r}: {exc}", "danger")
            return

    def _show_scenario(self, scenario: Scenario) -> None:
        """Put a loaded scenario in place, with its latest stored run (or none)."""
        name = scenario.name
        self.store_error = ""
        from workbench.app.derive import default_zone

        zones = ["UTC", *sorted({d.timezone for d in scenario.datacenters} - {"UTC"})]
        self.param.tz.objects = zones
        # The zone shown stays when the new scenario has it; else the zone most sites are in.
        keep = self.tz in zones and self.tz != "UTC"
        self.envelope = None
        self.param.update(scenario=scenario, result=None, baselines={}, bound={},
                          run_info={}, compare_ids=[], offers=None, offers_from={},
                          flex_pick={},
                          tz=self.tz if keep else default_zone(scenario.datacenters,
                                                               scenario.start))
        if set(self.carbon_caps_kg) != {d.name for d in scenario.datacenters}:
            self.carbon_caps_kg = {d.name: self.carbon_cap_kg / len(scenario.datacenters)
                                   for d in scenario.datacenters}
        self.refresh_runs()
        latest = self.latest_run_id()
        if latest is not None:
            self.load_run(latest)
        else:
            self.refresh_tradeoff()
            self.say(f"scenario {name}: {len(scenario.jobs)} jobs, {scenario.n_slots} slots "
                     f"of {scenario.slot_s // 60} min; no stored run yet", "info")

    def planning_scenario(self) -> Scenario:
        """The loaded scenario at the chosen slot length (its cube resampled)."""
        sc = self.scenario
        if sc is None:
            if self.store_error:
                raise ScenarioError(f"no scenario loaded: {self.store_error}")
            raise ScenarioError("no scenario loaded; pick one in the sidebar")
        return stored_runs.at_slot(sc, int(self.slot_minutes) * 60)

    # -- knobs ---------------------------------------------------------------------------
    def knobs(self, policy: str | None = None) -> dict[str, Any]:
        """The sidebar's knobs that ``policy`` (default: the selected one) accepts, caps
        apart (:meth:`caps`)."""
        name = policy or self.policy
        wanted: dict[str, Any] = {"V": float(self.V),
                                  "migration_threshold": float(self.migration_threshold)}
        if self.gpu_counts:
            wanted["gpu_counts"] = tuple(sorted(int(n) for n in self.gpu_counts))
        accepted = set(policy_knobs(name))
        if "caps" in accepted:
            accepted.add("carbon_cap_kg")  # made into the spec's Caps by run_spec
        return {k: v for k, v in wanted.items() if k in accepted}

    def caps(self, policy: str | None = None) -> Caps:
        """The sidebar's carbon cap for ``policy`` (none where it takes none): kg for the
        fleet, a percentage below asap-home, or kg per datacenter."""
        if "caps" not in policy_knobs(policy or self.policy):
            return Caps()
        if self.cap_mode == "global":
            if self.carbon_cap_pct is not None:
                return Caps(carbon_pct_below_baseline=float(self.carbon_cap_pct))
            return Caps(carbon_kg=float(self.carbon_cap_kg))
        if self.cap_mode == "per datacenter":
            return Caps(carbon_kg_by_dc={k: float(v) for k, v in self.carbon_caps_kg.items()})
        return Caps()

    def run_spec(self, sc: Scenario | None = None) -> RunSpec:
        """The sidebar's choices as a run spec for the planning scenario ``sc`` (default:
        :meth:`planning_scenario`). Raises ValueError naming what to fix."""
        sc = self.planning_scenario() if sc is None else sc
        return RunSpec(scenario=sc.name, policy=self.policy, knobs=self.knobs(),
                       caps=self.caps(), forecast=self.forecast_settings(), baseline=False,
                       power_limits=DEFAULT_MENU if self.power_limits else ())

    def forecast_settings(self) -> ForecastSettings:
        """The sidebar's forecast: its mode (None: the honest default) and error."""
        noisy = self.forecast_mode == "noisy"
        return ForecastSettings(
            mode=None if self.forecast_mode == HONEST_FORECAST else self.forecast_mode,
            error=float(self.forecast_error) if noisy else 0.0, model=self.forecast_model)

    # -- validation ----------------------------------------------------------------------
    def enter(self, knob: str, text: str) -> str:
        """What the operator typed for ``knob`` (``V``, ``carbon_cap_kg``,
        ``carbon_cap_kg:<dc>``, ``migration_threshold``, ``forecast_error``).

        A valid value is set and its error cleared; an invalid one leaves the parameter as it
        was and records the reason in :attr:`input_errors` (Run is refused until it is
        fixed). Returns the reason, or ``""``.
        """
        if knob == "carbon_cap_kg":  # kg or a percentage, as the CLI takes it
            caps, why = check_cap(text)
            if caps is not None:
                pct = caps.carbon_pct_below_baseline
                self.param.update(carbon_cap_pct=pct, **(
                    {} if pct is not None else {"carbon_cap_kg": caps.carbon_kg}))
            self.input_errors = {**{k: v for k, v in self.input_errors.items() if k != knob},
                                 **({knob: why} if why else {})}
            return why
        value, why = check_knob(knob, text)
        errors = {k: v for k, v in self.input_errors.items() if k != knob}
        if why:
            errors[knob] = why
        elif knob.startswith("carbon_cap_kg:"):
            self.carbon_caps_kg = {**self.carbon_caps_kg, knob.split(":", 1)[1]: value}
        else:
            setattr(self, knob, value)
        self.input_errors = errors
        return why

    def blocking_errors(self) -> dict[str, str]:
        """The input errors that matter for the current choices (a per-datacenter cap is
        moot while the cap mode is global, and so on)."""
        def relevant(knob: str) -> bool:
            if knob == "carbon_cap_kg":
                return self.cap_mode == "global"
            if knob.startswith("carbon_cap_kg:"):
                return self.cap_mode == "per datacenter"
            if knob == "forecast_error":
                return self.forecast_mode == "noisy"
            return knob in policy_knobs(self.policy) or knob not in ("V",
                                                                      "migration_threshold")
        out = {k: v for k, v in self.input_errors.items() if relevant(k)}
        why = None if self.scenario is None else unsuitable(self.policy, self.scenario)
        return out if why is None else {**out, "policy": why}  # it would repeat another

    # -- running -------------------------------------------------------------------------
    def cancel(self) -> None:
        """Ask the running computation to stop after its current slot."""
        if self.running:
            self.run_progress.cancel_requested.set()
            self.stage = "cancelling after the current slot…"

    def run_request(self) -> RunRequest:
        """The sidebar parsed: the run, the planning scenario, the comparisons wanted.

        Raises ValueError (or ScenarioError) naming what to fix.
        """
        sc = self.planning_scenario()
        spec = self.run_spec(sc)
        key = ComparisonKey(db_path=self.db_path, scenario=sc.name,
                            fingerprint=self.fingerprint, slot_s=sc.slot_s, n_slots=sc.n_slots,
                            forecast_mode=spec.forecast.mode, metered=spec.caps.metered(),
                            forecast_error=spec.forecast.error_in_effect,
                            forecast_model=spec.forecast.model,
                            power_limits=spec.power_limits)
        return RunRequest(spec=spec, scenario=sc, key=key, db_path=self.db_path,
                          comparisons=tuple(b for b in self.baseline_policies
                                            if b != self.policy), save=bool(self.save_runs))

    def compute(self) -> RunOutcome:
        """Run the selected policy, then the comparison policies not yet shared
        (:func:`workbench.app.running.run_with_comparisons`).

        Touches no parameter but the progress ones: safe in a worker thread. Errors a user
        can fix come back in :attr:`RunOutcome.error`; a cancelled run as ``cancelled``.
        """
        errors = self.blocking_errors()
        if errors:
            return RunOutcome(result=None, error="fix the inputs first: " + "; ".join(
                f"{k}: {v}" for k, v in errors.items()))
        try:
            request = self.run_request()
        except RUN_ERRORS as exc:
            return RunOutcome(result=None, error=f"bad input: {exc}")
        return run_with_comparisons(request, self.shared, self.run_progress)

    def apply(self, outcome: RunOutcome) -> None:
        """Publish an outcome; on error keep the previous results and show the message."""
        if outcome.store_error:
            self.store_error = outcome.store_error
        if outcome.result is None:
            self.say(outcome.error, "warning" if outcome.cancelled else "danger")
            return
        res = outcome.result
        if outcome.run_id is not None:
            res.meta["run_id"] = outcome.run_id
        info = stored_runs.run_info_of(res, outcome.run_id)
        self.param.update(result=res, baselines=outcome.baselines, run_info=info,
                          bound=self._bound_of(res.meta.get("bound")),
                          runs_done=self.runs_done + 1)
        self.refresh_runs()
        self.refresh_tradeoff()
        self._announce(res, outcome.notes)

    def _announce(self, res: RunResult, notes: list[str]) -> None:
        from workbench.app.derive import run_summary

        self.say(*run_summary(res, self.tz or "UTC", notes))

    def run(self, compute: Callable[[], RunOutcome] | None = None) -> RunResult | None:
        """Run synchronously (tests, notebooks); returns the new result or None on error.
        ``compute``: what to run (default :meth:`compute`, the sidebar's run;
        :meth:`compute_event` plans the chosen offer)."""
        self.running = True
        try:
            outcome = (compute or self.compute)()
        finally:
            self.running = False
        self.apply(outcome)
        return outcome.result

    async def run_async(self, compute: Callable[[], RunOutcome] | None = None
                        ) -> RunResult | None:
        """Run in a worker thread (``compute`` as for :meth:`run`); the event loop keeps
        serving this and other sessions.

        A session closed meanwhile (:meth:`close_session`) gets nothing published: the run
        finishes and is stored (with *Save runs in the store*), and the next visitor opens
        on it."""
        if self.running:
            return None
        self.running = True
        try:
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(None, compute or self.compute)
        finally:
            if not self.closed:
                self.running = False
        if not self.closed:
            self.publisher.flush()
            self.apply(outcome)
        return outcome.result

    def close_session(self) -> None:
        """The browser session is gone (its tab closed): publish nothing more to it (a
        message to a closed connection is a warning in the server's log for each)."""
        self.closed = True
        if self.running:
            log.info("a session closed during a run: it finishes%s, unseen",
                     " and is stored" if self.save_runs else "")

    # -- stored runs -----------------------------------------------------------------------
    def refresh_runs(self) -> None:
        """Re-read the scenario's stored runs (:meth:`Store.run_summaries`)."""
        if self.scenario is None:
            self.runs_table = None
            return
        try:
            with self.store() as store:
                self.runs_table = store.run_summaries(self.scenario.name)
        except StoreError as exc:
            self.say(f"cannot read the stored runs: {exc}", "danger")

    def latest_run_id(self) -> str | None:
        """The newest stored run of the scenario that is not a comparison (baseline) run,
        else the newest run at all; None when none is stored."""
        table = self.runs_table
        if table is None or table.empty:
            return None
        own = table[table["status"] != "baseline"]
        return str((own if len(own) else table)["run_id"].iloc[0])

    def load_run(self, run_id: str) -> RunResult | None:
        """Show a stored run: its plan, metrics, knobs; its comparisons are the newest stored
        runs of the baseline policies on the same scenario and settings."""
        try:
            with self.store() as store:
                info = store.run_info(run_id)
                res = self._stored_result(store, run_id)
                table = (self.runs_table if self.runs_table is not None
                         and info["scenario"] == getattr(self.scenario, "name", None)
                         else store.run_summaries(info["scenario"]))
                baselines, bound = stored_runs.stored_comparisons(
                    store, table, info, res, self.baseline_policies, self.scenario)
        except StoreError as exc:
            self.say(f"cannot load run {run_id}: {exc}", "danger")
            return None
        slot_s = res.meta.get("slot_s")
        if slot_s and int(slot_s) // 60 in SLOT_MINUTES:
            self.slot_minutes = int(slot_s) // 60
        info["stored"] = True
        self.param.update(input_errors={}, **restored_knobs(
            info, self.param.policy.objects, self.param.forecast_mode.objects))
        self.param.trigger("cap_mode")  # rebuild the cap fields with the restored values
        self.param.update(result=res, baselines=baselines, run_info=info,
                          bound=self._bound_of(bound, slot_s))
        self.refresh_tradeoff()
        self._announce(res, [])
        return res

    def _stored_result(self, store: Store, run_id: str) -> RunResult:
        """A stored run as loaded, with its attribution against its stored asap-home run
        (``meta["attribution"]``, or why not in ``meta["attribution_missing"]``): read once
        per server and shared read-only by the sessions (a stored run does not change;
        one without an attribution is read again, in case its comparison is stored since)."""
        sc = self.scenario
        cached = self.shared.stored_run(self.db_path, run_id, self.fingerprint)
        if cached is not None:
            return cached
        res = stored_runs.load_result(store, run_id, sc)
        if sc is not None and res.meta.get("scenario") == sc.name:
            stored_runs.fill_equal_work(res.metrics, res.plan, sc)
            att, why = stored_runs.stored_attribution(store, run_id, sc, res)
        else:
            att, why = None, "attribution not available: the run's scenario is not loaded"
        if att is None:
            res.meta["attribution_missing"] = why
            if why != stored_runs.ATTRIBUTION_BEFORE_V6:
                return res  # not kept: an asap-home run stored later gives it one
        else:
            res.meta["attribution"] = att
        self.shared.keep_stored_run(self.db_path, run_id, self.fingerprint, res)
        return res

    def _bound_of(self, bound: Mapping[str, Any] | None, slot_s: Any = None
                  ) -> dict[str, Any]:
        """A hindsight bound with its equal-work figures, or ``{}``."""
        return stored_runs.with_equal_work_bound(bound, self.scenario, slot_s) or {}

    def missing_references(self) -> dict[str, str]:
        """Why the shown run lacks asap-home or the hindsight bound
        (:func:`workbench.app.derive.missing_references`)."""
        from workbench.app.derive import missing_references

        return missing_references(self.baseline_policies)

    def rename_run(self, run_id: str, name: str) -> None:
        try:
            with Store(self.db_path) as store:
                store.rename_run(run_id, name)
        except StoreError as exc:
            self.say(f"cannot rename run {run_id}: {exc}", "danger")
            return
        if self.run_info.get("run_id") == run_id:
            self.run_info = {**self.run_info, "name": name.strip() or None}
        self.refresh_runs()

    def delete_runs(self, run_ids: list[str]) -> None:
        try:
            with Store(self.db_path) as store:
                for rid in run_ids:
                    store.delete_run(rid)
        except StoreError as exc:
            self.say(f"cannot delete runs: {exc}", "danger")
            return
        self.shared.forget_runs(self.db_path, run_ids)
        self.compare_ids = [r for r in self.compare_ids if r not in run_ids]
        if self.run_info.get("run_id") in run_ids:
            self.run_info = {**self.run_info, "run_id": None, "stored": False}
        self.refresh_runs()
        self.refresh_tradeoff()
        self.say(f"deleted {len(run_ids)} stored run(s)", "info")

    # -- derived -------------------------------------------------------------------------
    def refresh_tradeoff(self) -> None:
        """The V trade-off: stored Lyapunov runs that differ from the shown run in V alone."""
        from workbench.app.derive import tradeoff_frame

        info = self.run_info
        if self.scenario is None or info.get("policy") != "lyapunov":
            self.tradeoff = None
            return
        try:
            with self.store() as store:
                runs = store.runs(self.scenario.name)
                keep = [rec["run_id"] for rec in runs.to_dict("records")
                        if stored_runs.differs_only_in(info, rec, "V")]
                runs = runs[runs["run_id"].isin(keep)]
                metrics = {rid: store.run_metrics(rid) for rid in runs["run_id"]}
        except StoreError as exc:
            self._store_failed(exc, "the V trade-off of stored runs is not shown")
            self.tradeoff = None
            return
        frame = tradeoff_frame(runs, metrics)
        self.tradeoff = frame if len(frame) >= 2 else None

    def quote(self, spec: JobSpec, *, carbon_price_per_kg: float = 0.0,
              respect_plan: bool = False, power_limits: tuple[float, ...] = ()
              ) -> Quote | None:
        """Quote a job against the planning scenario (and the latest plan's occupancy);
        ``power_limits``: a menu of GPU power limits to quote each option at as well."""
        try:
            sc = self.planning_scenario()
            occupancy = (self.result.slots if respect_plan and self.result is not None
                         and self.result.meta.get("slot_s") == sc.slot_s else None)
            fc = self.forecast_settings()
            q = quote(sc, spec, carbon_price_per_kg=carbon_price_per_kg,
                      occupancy=occupancy, forecast_mode=fc.mode,
                      forecast_error=fc.error_in_effect, forecast_model=fc.model,
                      power_limits=power_limits)
        except RUN_ERRORS as exc:
            self.say(f"quote failed: {exc}", "danger")
            return None
        self.last_quote = q
        best = q.recommended
        if best is None:
            self.say("quote: no option finishes before the deadline", "warning")
        else:
            tz = self.tz or "UTC"
            start = pd.Timestamp(best["start"]).tz_convert(tz)
            self.say(f"quote, cheapest option: {best['datacenter']} {best['n_gpus']}x"
                     f"{best['gpu_type']} from {start:%a %m-%d %H:%M} {tz}, "
                     f"{best['cost']:.2f} {q.currency} (the Quote tab ranks by your choice)",
                     "success")
        return q

    # -- flexibility ---------------------------------------------------------------------
    def compute_offers(self) -> pd.DataFrame | None:
        """The flexibility envelope of the shown run (:meth:`workbench.flexibility.Envelope.
        of_run`, the function ``workbench flexibility`` reads): every site's offer for each
        start hour, ``flex_hours`` long at ``flex_notice_h`` hours' notice
        (:func:`workbench.flexibility.offers`). The best offer is picked. A refusal (no run,
        bad hours, a run already holding events) is said in one line; returns None."""
        job = self._offers_job()
        return None if job is None else self._show_offers(*job())

    async def compute_offers_async(self) -> pd.DataFrame | None:
        """:meth:`compute_offers` with the envelope read in a worker thread (a large fleet
        takes seconds); the event loop keeps serving the sessions."""
        job = self._offers_job()
        if job is None:
            return None
        self.stage = "reading the flexibility envelope…"
        try:
            found = await asyncio.get_running_loop().run_in_executor(None, job)
        finally:
            self.stage = ""
        return None if self.closed else self._show_offers(*found)

    def _offers_job(self) -> Callable[[], tuple[Any, ...]] | None:
        """The envelope's reading as a function that touches no parameter (safe in a worker
        thread), or None after saying why it is refused."""
        why = self._offers_refusal()
        res, sc0 = self.result, self.scenario
        if not why and res is not None and sc0 is not None:
            hours, notice = float(self.flex_hours), float(self.flex_notice_h)
            sc = stored_runs.at_slot(sc0, int(res.meta.get("slot_s") or sc0.slot_s))
            starts = start_slots(sc, hours)
            if not starts:
                why = (f"{hours:g}-hour events do not fit the horizon of {sc.name} "
                       f"({sc.n_slots * sc.slot_s / 3600:g} h)")
        if why or res is None or sc0 is None:
            self.say(f"flexibility: {why}", "danger")
            return None
        sites = [self.flex_site] if self.flex_site else None
        made = {"run_id": self.run_info.get("run_id"), "label": stored_runs.label(
            self.run_info) if self.run_info else res.policy, "policy": res.policy,
                "slot_s": sc.slot_s, "hours": hours, "notice_hours": notice}

        def job() -> tuple[Any, ...]:
            try:
                env = Envelope.of_run(sc, res)
                return env, envelope_offers(env, hours, notice, sites, starts), made, ""
            except (ValueError, KeyError) as exc:
                return None, None, made, f"the shown run's plan cannot be read: {exc}"

        return job

    def _show_offers(self, env: Envelope | None, table: pd.DataFrame | None,
                     made: dict[str, Any], error: str) -> pd.DataFrame | None:
        """Publish the offers read by :meth:`_offers_job` (the largest picked)."""
        if env is None or table is None:
            self.say(f"flexibility: {error}", "danger")
            return None
        self.envelope = env
        best = table.loc[table["sheddable_kw"].idxmax()] if len(table) else None
        self.param.update(offers=table, offers_from=made, flex_pick={} if best is None else {
            "datacenter": str(best["datacenter"]), "start": str(best["start"])})
        offering = int((table["sheddable_kw"] > 0).sum())
        self.say(f"flexibility: {len(table)} offers of {made['hours']:g}-hour events at "
                 f"{made['notice_hours']:g} h notice, {offering} with kW to shed", "info")
        return table

    def _offers_refusal(self) -> str:
        """Why the shown run's envelope cannot be read now, or ``""``."""
        res, sc = self.result, self.scenario
        hours, notice = self.flex_hours, self.flex_notice_h
        if hours is None or not 0 < float(hours) <= 168:
            return f"event hours must be in (0, 168], got {hours}"
        if notice is None or not 0 <= float(notice) <= 168:
            return f"notice hours must be in [0, 168], got {notice}"
        if res is None or sc is None:
            return "no run shown: run one or load one in the Runs tab first"
        names = [d.name for d in sc.datacenters]
        if self.flex_site and self.flex_site not in names:
            return f"site {self.flex_site!r} is not in {sc.name}; it has {', '.join(names)}"
        if res.meta.get("scenario") not in (None, sc.name):
            return f"the shown run is of {res.meta.get('scenario')}, not of {sc.name}"
        try:
            held = len(self.shown_events())
        except ValueError as exc:
            return f"the shown run's grid events cannot be read: {exc}"
        if held > len(sc.supply.grid_events):
            return (f"the shown run holds {held} grid event(s): offers are read off the plan "
                    "without them; open or run one without events (Runs tab, or Run)")
        return ""

    def shown_events(self) -> tuple[GridEvent, ...]:
        """The grid events the shown run held (:func:`workbench.app.derive.run_events`)."""
        from workbench.app.derive import run_events

        return () if self.result is None else run_events(self.result.meta)

    def pick_offer(self, datacenter: str, start: Any) -> None:
        """Choose the offer of ``datacenter`` whose start is nearest ``start`` (a time: UTC
        when naive, or an ISO text)."""
        table = self.offers
        if table is None or table.empty:
            return
        rows = table[table["datacenter"] == datacenter]
        if rows.empty:
            return
        when = pd.Timestamp(start)
        when = when.tz_localize("UTC") if when.tzinfo is None else when
        gap = (pd.to_datetime(rows["start"], utc=True) - when).abs()
        self.flex_pick = {"datacenter": datacenter,
                          "start": str(rows.loc[gap.idxmin(), "start"])}

    def picked_offer(self) -> dict[str, Any] | None:
        """The chosen offer's row, or None."""
        table, pick = self.offers, self.flex_pick
        if table is None or not pick:
            return None
        rows = table[(table["datacenter"] == pick["datacenter"])
                     & (table["start"] == pick["start"])]
        return None if rows.empty else rows.iloc[[0]].to_dict("records")[0]

    def picked_curve(self) -> list[tuple[float, float]]:
        """The chosen offer's cost curve (:meth:`workbench.flexibility.Envelope.
        cost_curve`), or ``[]``."""
        offer, env = self.picked_offer(), self.envelope
        if offer is None or env is None:
            return []
        slot = env.sc.slot_of(pd.Timestamp(offer["start"]).to_pydatetime())
        return env.cost_curve(str(offer["datacenter"]), slot, float(offer["hours"]))

    def event_request(self) -> RunRequest:
        """The chosen offer planned as a grid event: the sidebar's run (which made, or was
        restored from, the run the offers are read off) holding one more event at the
        offer's limit, notice and hours, as ``plan --grid-event DC,START,HOURS,LIMIT_KW,
        NOTICE_H`` plans it; no comparison runs (its reference is the same run without
        the event). Raises ValueError naming what to fix."""
        offer = self.picked_offer()
        if offer is None:
            raise ValueError("no offer chosen: compute the offers and pick a cell")
        if float(offer["sheddable_kw"]) <= 0:
            raise ValueError(f"{offer['datacenter']} has no kW to shed from {offer['start']}"
                             ": pick a cell with sheddable kW")
        request = self.run_request()
        made = self.offers_from
        if request.spec.policy != made.get("policy"):
            raise ValueError(f"the sidebar's policy {request.spec.policy} is not the one the "
                             f"offers were read off ({made.get('policy')}): pick it again "
                             "or compute the offers of this run")
        if request.scenario.slot_s != made.get("slot_s"):
            raise ValueError("the sidebar's slot length differs from the run the offers "
                             "were read off: set it back or compute the offers again")
        event = GridEvent(datacenter=str(offer["datacenter"]),
                          start=pd.Timestamp(offer["start"]).to_pydatetime(),
                          hours=float(offer["hours"]), limit_kw=float(offer["limit_kw"]),
                          notice_hours=float(offer["notice_hours"]))
        caps = request.spec.caps.with_events((*request.spec.caps.events, event))
        return replace(request, spec=replace(request.spec, caps=caps), comparisons=(),
                       key=replace(request.key, metered=caps.metered()))

    def compute_event(self) -> RunOutcome:
        """Plan the chosen offer as a grid event (:meth:`event_request`) through the app's
        run (:func:`workbench.app.running.run_with_comparisons`: progress, Cancel, stored
        like any run); safe in a worker thread, like :meth:`compute`."""
        errors = self.blocking_errors()
        if errors:
            return RunOutcome(result=None, error="fix the inputs first: " + "; ".join(
                f"{k}: {v}" for k, v in errors.items()))
        try:
            request = self.event_request()
        except RUN_ERRORS as exc:
            return RunOutcome(result=None, error=f"cannot plan the event: {exc}")
        return run_with_comparisons(request, self.shared, self.run_progress)

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
