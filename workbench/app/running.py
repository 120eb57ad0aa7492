"""A run as the app makes one: the policy, then its comparison runs, with progress and Cancel.

:func:`run_with_comparisons` runs a :class:`RunRequest` (the sidebar parsed: a
:class:`~workbench.runner.RunSpec`, the planning scenario, the comparison policies wanted)
through the runner (:func:`workbench.runner.simulate_spec`). Comparison runs not yet in the
server's :class:`~workbench.app.shared.SharedCache` run once and are kept there (and stored as
``baseline`` runs) for every session; the run gets the hindsight bound and the attribution
of its saving against them. It touches no session state but a :class:`RunProgress`, so it is
safe in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench import runner
from workbench.app.shared import Comparison, ComparisonKey, SharedCache
from workbench.cubes import CubeError
from workbench.metrics import attribute_savings
from workbench.model import Scenario, ScenarioError
from workbench.policies import unsuitable
from workbench.runner import RunSpec
from workbench.sim import AllocationError, RunResult, SlotRecord
from workbench.store import Store, StoreError

if TYPE_CHECKING:
    from workbench.forecast import ModelForecast

log = logging.getLogger(__name__)

RUN_ERRORS = (ValueError, RuntimeError, ScenarioError, StoreError, CubeError, AllocationError)
"""What a run may raise for a bad input, an infeasible cap or a solver failure; shown to the
user as a message (anything else is a bug and propagates)."""


class RunCancelled(Exception):
    """Raised inside a run (from its progress recorder) when the operator pressed Cancel."""


class ProgressRecorder:
    """A recorder that reports each finished slot to a callback (from the worker thread)
    and stops the run, by raising :class:`RunCancelled`, once ``cancel`` is set."""

    def __init__(self, callback: Callable[[int], None],
                 cancel: threading.Event | None = None) -> None:
        self._callback = callback
        self._cancel = cancel

    def start(self, run_meta: Mapping[str, Any]) -> None:  # noqa: ARG002
        return None

    def record(self, slot_record: SlotRecord) -> None:  # noqa: ARG002
        if self._cancel is not None and self._cancel.is_set():
            raise RunCancelled
        self._callback(1)

    def finish(self, result: RunResult) -> None:  # noqa: ARG002
        return None


def quiet_closed_sockets(loop: asyncio.AbstractEventLoop) -> None:
    """Let ``loop`` (the server's) drop a message to a tab that closed while it was being
    written, with a debug line instead of a "Task exception was never retrieved" traceback
    in the server's log. Panel writes a document patch as several websocket frames without
    awaiting them; a tab that closes between two frames leaves a failed write task that no
    one awaits. Every other exception goes to the handler that was there before (or the
    loop's default). Installed once per loop."""
    from tornado.iostream import StreamClosedError
    from tornado.websocket import WebSocketClosedError

    previous = loop.get_exception_handler()
    if getattr(previous, "quiets_closed_sockets", False):
        return

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), WebSocketClosedError | StreamClosedError):
            log.debug("a message to a closed tab was dropped: %s", context.get("message"))
        elif previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    handler.quiets_closed_sockets = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)


class SessionPublisher:
    """Where a session's progress goes: ``update`` (the session's ``param.update``) while
    ``is_open()``, at once, or, once :meth:`defer` was called (served), kept for
    :meth:`flush`, which the session's event loop calls (a periodic callback). Every message
    to the browser then leaves from the loop, where Bokeh handles a connection that has just
    closed (an update sent from the worker thread to a tab that had just closed was a
    traceback in the server's log)."""

    def __init__(self, update: Callable[..., object], is_open: Callable[[], bool]) -> None:
        self._update = update
        self._is_open = is_open
        self._pending: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def defer(self) -> None:
        """From now on, progress waits for :meth:`flush`."""
        self._pending = {}

    def flush(self) -> None:
        """Publish the progress the worker thread left (on the session's event loop)."""
        if self._pending is None:
            return
        with self._lock:
            pending, self._pending = self._pending, {}
        if pending and self._is_open():
            self._update(**pending)

    def __call__(self, **params: Any) -> None:
        if not self._is_open():
            return
        if self._pending is None:
            self._update(**params)
            return
        with self._lock:
            self._pending.update(params)


class RunProgress:
    """One session's progress: slots done per policy, published through ``publish`` (the
    session's ``param.update``: ``progress``, ``progress_max``, ``progress_rows``,
    ``stage``), and the Cancel request the recorder checks after each slot.

    A row per policy: ``policy, done, total, started_s, finished_s`` (``time.monotonic``;
    None while not started or running). Counts are published in steps of 1 % of the total:
    every published change is a message to the browser, and one per slot and policy would
    swamp the session and slow the run down severalfold.
    """

    def __init__(self, publish: Callable[..., object]) -> None:
        self._publish = publish
        self._lock = threading.Lock()
        self._rows: list[dict[str, Any]] = []
        self._done = 0
        self._shown = 0
        self._total = 1
        self.cancel_requested = threading.Event()

    def begin(self, policies: Sequence[str], n_slots: int, stage: str) -> None:
        """A new run of ``policies`` in turn, ``n_slots`` each; the first starts now."""
        with self._lock:
            self.cancel_requested.clear()
            self._rows = [{"policy": name, "done": 0, "total": n_slots, "started_s": None,
                           "finished_s": None} for name in policies]
            self._rows[0]["started_s"] = time.monotonic()
            self._done = self._shown = 0
            self._total = max(n_slots * len(self._rows), 1)
            self._publish(progress=0, progress_max=self._total, progress_rows=self._copy(),
                          stage=stage)

    def next_policy(self, i: int, stage: str) -> None:
        """Policy ``i`` (0: the first) starts now; the one before it has finished."""
        with self._lock:
            now = time.monotonic()
            if i > 0:
                self._rows[i - 1]["finished_s"] = now
            if i < len(self._rows):
                self._rows[i]["started_s"] = now
            self._publish(progress_rows=self._copy(), stage=stage)

    def tick(self, n: int) -> None:
        """``n`` more slots done by the running policy."""
        with self._lock:
            self._done = min(self._done + n, self._total)
            for row in self._rows:
                if row["started_s"] is not None and row["finished_s"] is None:
                    row["done"] = min(row["done"] + n, row["total"])
                    break
            step = max(self._total // 100, 1)
            if self._done - self._shown >= step or self._done == self._total:
                self._shown = self._done
                self._publish(progress=self._done, progress_rows=self._copy())

    def recorder(self) -> ProgressRecorder:
        """A simulator recorder feeding :meth:`tick` and honouring Cancel."""
        return ProgressRecorder(self.tick, self.cancel_requested)

    def _copy(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rows]


@dataclass(frozen=True)
class RunRequest:
    """What the sidebar asks for, parsed.

    ``spec`` the run (its knobs and caps, the forecast); ``scenario`` the planning scenario
    (at the chosen slot length) it runs on; ``comparisons`` the policies to compare it with
    (its own excluded); ``key`` what their shared runs are kept under; ``save`` whether the
    run and new comparison runs go into the store at ``db_path``.
    """

    spec: RunSpec
    scenario: Scenario
    comparisons: tuple[str, ...]
    key: ComparisonKey
    db_path: str
    save: bool = True


@dataclass
class RunOutcome:
    """What a run of the app returns: a result, or an error, and notes.

    ``baselines`` the comparison policies' metrics; ``notes`` what the operator should know
    (a comparison unavailable or not saved); ``store_error`` why the run was not stored;
    ``cancelled`` True when Cancel stopped it.
    """

    result: RunResult | None
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str = ""
    notes: list[str] = field(default_factory=list)
    run_id: str | None = None
    cancelled: bool = False
    store_error: str = ""


def run_with_comparisons(request: RunRequest, shared: SharedCache,
                         progress: RunProgress) -> RunOutcome:
    """Run the request's policy, then the comparison policies not yet in ``shared``.

    Errors a user can fix come back in :attr:`RunOutcome.error`, a cancelled run as
    ``cancelled``; a comparison that fails or is cancelled is a note, the run stands.
    """
    sc = request.scenario
    # The scenario's own grid events and the request's: held by the run, reported against
    # the same run without them (the twin), as `plan --grid-event` does.
    spec = runner.with_scenario_events(request.spec, sc)
    base = runner.BASELINE
    # A percentage carbon cap is resolved against asap-home's carbon: that run goes first.
    first = ([base] if spec.caps.needs_baseline and not shared.comparisons(request.key, [base])
             else [])
    # A comparison that would only repeat another on this scenario is not run (the
    # sidebar says so under Compare with).
    todo = [b for b in request.comparisons
            if b not in first and b not in shared.comparisons(request.key, [b])
            and unsuitable(b, sc) is None]
    twin_row = [f"{spec.policy} without the events"] if spec.caps.has_events else []
    progress.begin([*first, *twin_row, spec.policy, *todo], sc.n_slots,
                   f"running {(first or twin_row or [spec.policy])[0]} over {sc.n_slots} "
                   "slots")
    notes: list[str] = []
    try:
        # The model forecast is fitted once, for the run and its comparisons alike.
        fitted = runner.fit_forecast(sc, runner.forecast_mode(spec, sc), spec.forecast.model)
        caps = None
        if spec.caps.needs_baseline:
            notes += _run_comparisons(request, first, fitted, shared, progress, offset=0)
            asap = shared.comparisons(request.key, [base]).get(base)
            if asap is None:
                return RunOutcome(result=None, notes=notes, cancelled=bool(first) and any(
                    "cancelled" in n for n in notes), error=(
                    f"the carbon cap of {spec.caps.label} below {base} needs {base}'s carbon, "
                    f"and {base} did not run: {'; '.join(notes) or 'unknown reason'}"))
            caps = spec.caps.resolved(float(asap.metrics["carbon_kg"]))
            progress.next_policy(len(first), f"running {(twin_row or [spec.policy])[0]} "
                                 f"over {sc.n_slots} slots")
        caps, twin = runner.event_twin(spec, sc, spec.caps if caps is None else caps,
                                       fitted=fitted, recorders=[progress.recorder()])
        if twin is not None:
            progress.next_policy(len(first) + 1, f"running {spec.policy} holding the grid "
                                 f"events over {sc.n_slots} slots")
        result, _ = runner.simulate_spec(spec, sc, caps=caps, fitted=fitted,
                                         recorders=[progress.recorder()])
        if twin is not None:
            runner.settle_events(result, twin, sc, caps)
    except RunCancelled:
        return RunOutcome(result=None, cancelled=True,
                          error=f"{spec.policy} run cancelled; the results shown are the "
                          "previous run's")
    except RUN_ERRORS as exc:
        return RunOutcome(result=None, error=f"{spec.policy} failed: {exc}")
    notes += _run_comparisons(request, todo, fitted, shared, progress,
                              offset=len(first) + len(twin_row) + 1)
    kept = shared.comparisons(request.key, request.comparisons)
    _attach(result, kept, sc)
    outcome = RunOutcome(result=result, notes=notes,
                         baselines={name: dict(c.metrics) for name, c in kept.items()})
    if request.save:
        try:
            with Store(request.db_path) as store:
                outcome.run_id = store.save_run(result.meta, result.plan, result.migrations,
                                                result.slots, result.metrics)
        except StoreError as exc:
            notes.append(f"run not saved: {exc}")
            outcome.store_error = f"run not saved: {exc}"
    return outcome


def _run_comparisons(request: RunRequest, todo: Sequence[str], fitted: ModelForecast | None,
                     shared: SharedCache, progress: RunProgress, offset: int = 1) -> list[str]:
    """Run each comparison policy of ``todo`` and keep it in ``shared`` (and the store, as a
    ``baseline`` run a later session finds); returns the notes of what did not run.
    ``offset`` is the progress row of the first of them."""
    notes: list[str] = []
    for i, name in enumerate(todo):
        if offset + i > 0:
            progress.next_policy(offset + i, f"comparison {i + 1}/{len(todo)}: {name} (kept "
                                 "for every session)")
        try:
            base, bound = runner.simulate_spec(request.spec.comparison(name), request.scenario,
                                               fitted=fitted, recorders=[progress.recorder()])
        except RunCancelled:
            notes.append(f"comparison runs cancelled from {name} on")
            break
        except RUN_ERRORS as exc:
            notes.append(f"baseline {name} unavailable: {exc}")
            continue
        run_id = None
        if request.save:
            try:
                with Store(request.db_path) as store:
                    run_id = store.save_run({**base.meta, "status": "baseline"}, base.plan,
                                            base.migrations, base.slots, base.metrics)
            except StoreError as exc:
                notes.append(f"comparison run {name} not saved: {exc}")
        shared.keep_comparison(request.key, name, Comparison(
            metrics=base.metrics, plan=base.plan,
            bound=None if bound is None else dict(base.meta["bound"]), run_id=run_id))
    return notes


def _attach(result: RunResult, comparisons: Mapping[str, Comparison], sc: Scenario) -> None:
    """Give the run the hindsight plan's bound (unless it has its own) and the attribution
    of its saving against asap-home (with that run's id: reopened, it is attributed against
    the same plan)."""
    hindsight = comparisons.get("offline")
    if hindsight is not None and hindsight.bound and "bound" not in result.meta:
        result.meta["bound"] = dict(hindsight.bound)
    asap = comparisons.get("asap-home")
    if asap is not None and result.policy != "asap-home":
        result.meta["attribution"] = attribute_savings(result, {"plan": asap.plan}, sc)
        if asap.run_id is not None:
            result.meta["baseline_run_id"] = asap.run_id
