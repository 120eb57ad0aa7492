"""Quote a new job: where, on what and when to run it, with predicted energy, cost and carbon.

The seed's "submit a task, measure it, route it to the best node": for a job described by a
:class:`JobSpec`, every datacenter, GPU type and GPU count in the job's range is an *option*.
For each option the one slot model (:mod:`workbench.outcome`) predicts the job's run as the
simulator would charge it, running alone and uninterrupted from a fresh start
(:func:`workbench.outcome.uninterrupted_run`, noise-free, the profile's gradient-noise
trajectory); every start slot between the job's arrival and its deadline is then priced
against the grid forecast, and the cheapest start is kept. The option with the lowest score
is recommended.

Per option (datacenter ``d``, GPU type ``g``, ``n`` GPUs), slot ``k`` of the run::

    charges_k = move_charges(...)      slot 0: the data's trip from home (8 * GB / Gbit/s,
                                       GB * kWh/GB half at each end) and the restart
    m_k       = best_batch(n, phi(done_k))        the batch a policy picks
    e_k       = slot_outcome(...).energy_kwh      kWh in d (IT x PUE, lost time included)
    run_s     = (slots - 1) * slot_s + used_s of the last slot
    cost(s)   = sum_k e_k * price[d, s+k] + source_kwh * price[home, s]
    carbon(s) likewise with carbon intensity / 1000
    score(s)  = cost(s) + carbon_price_per_kg * carbon_kg(s)

A start ``s`` is feasible when its slots lie in the horizon and ``start + run_s`` is by the
deadline (the simulator's ``deadline_met``). ``batch_size`` is the batch of the first slot
(it follows the gradient noise scale as the job progresses). A run that cannot finish within
the horizon is extrapolated (see :func:`workbench.outcome.uninterrupted_run`) so that its
duration and energy still say how far off it is.

Profiles predicted from the job's computation graph (:mod:`workbench.compute`; ``profile``
is ``"predicted"``, else ``"fitted"`` or ``"derived"``) carry a step-time interval
``(lo, hi)``; the option's run time then lies in ``lost_s + [lo, hi] * (run_s - lost_s)``
(``duration_lo_h``, ``duration_hi_h``; equal to ``duration_h`` for a fitted profile; the
batch choice does not depend on speed, so only the time making progress scales), and a start
whose slow end would overrun the deadline is noted.

GPU power limits (``power_limits``, a menu of fractions of the GPUs' maximum board power,
:func:`workbench.power_limits.check_menu`): each option is offered again at every limit
``L = f P_max`` below full power, the time-energy trade-off of the limit. The job at a limit
runs at ``X / r_t`` and draws ``P_it r_P`` (:func:`workbench.power_limits.limit_factors`,
at the GPUs' power at the job's start), which is the same run as the job with ``r_t`` times
its work at full power with its IT energy times ``r_P``::

    run'      = uninterrupted_run(job with work_samples * r_t)
    e'_k      = (e_k - t_k) r_P + t_k      t_k: the transfer energy drawn in d (slot 0)

``power_limit_w`` is the limit per GPU (the pool's ``max_power_w`` at full power).

Capacity: an option is offered only where the pool holds ``n`` GPUs; with ``occupancy`` (a
run's per-slot ``gpus_busy:<dc>/<gpu>`` columns, see :class:`workbench.sim.RunResult`) only
starts whose slots all have ``n`` GPUs free.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from workbench import outcome, perf
from workbench.forecast import DEFAULT_MODEL, FORECAST_MODES, default_forecast_mode, forecast
from workbench.model import Datacenter, GpuPool, Job, Scenario, as_utc
from workbench.outcome import RESTART_S_DEFAULT
from workbench.power_limits import check_menu, limit_factors
from workbench.sim.truth import horizon_cube
from workbench.units import G_PER_KG

log = logging.getLogger(__name__)

QUOTE_COLUMNS: tuple[str, ...] = (
    "datacenter", "region", "gpu_type", "n_gpus", "batch_size", "feasible", "start", "finish",
    "duration_h", "energy_kwh", "cost", "carbon_kg", "score", "cost_if_now", "carbon_kg_if_now",
    "note", "profile", "duration_lo_h", "duration_hi_h", "power_limit_w",
)
"""Columns of :attr:`Quote.options`, one row per (datacenter, GPU type, GPU count, power
limit)."""

RESTART_S = RESTART_S_DEFAULT
"""Seconds to load data or a checkpoint and warm up before the job makes progress (the
simulator's :data:`~workbench.outcome.RESTART_S_DEFAULT`, so that a quote and a run charge
the same start-up loss)."""

class QuoteError(ValueError):
    """The job description does not fit the scenario; the message says what to change."""


@dataclass(frozen=True)
class JobSpec:
    """A job to quote.

    Attributes
    ----------
    app : str
        Application whose performance profile applies (e.g. ``"cifar10"``).
    work_samples : float
        Total effective samples to process.
    home : str
        Datacenter where the job's data lives.
    min_gpus, max_gpus : int
        GPU-count range to consider (powers of two in the range, plus both ends).
    deadline_h : float or None
        Hours after arrival by which the job must finish; None: by the horizon end.
    arrival : datetime or None
        When the job can start (UTC); None: the scenario's first slot.
    gpu_types : tuple of str
        Allowed accelerator types; empty means any.
    checkpoint_gb : float
        Data or checkpoint size moved when the job runs away from home, GB: it travels
        from home on the job's first run elsewhere (the simulator's ``Job.dataset_gb``).
    """

    app: str
    work_samples: float
    home: str
    min_gpus: int = 1
    max_gpus: int = 8
    deadline_h: float | None = None
    arrival: datetime | None = None
    gpu_types: tuple[str, ...] = ()
    checkpoint_gb: float = 1.0
    dataset_gb: float | None = None

    def __post_init__(self) -> None:
        if not self.app:
            raise QuoteError("app must not be empty, e.g. 'cifar10'")
        if not (math.isfinite(self.work_samples) and self.work_samples > 0):
            raise QuoteError(f"work_samples must be a positive number, got {self.work_samples}")
        if not (isinstance(self.min_gpus, int) and isinstance(self.max_gpus, int)
                and 1 <= self.min_gpus <= self.max_gpus):
            raise QuoteError(
                f"GPU range must satisfy 1 <= min_gpus <= max_gpus, got {self.min_gpus}.."
                f"{self.max_gpus}"
            )
        if self.deadline_h is not None and not (
                math.isfinite(self.deadline_h) and self.deadline_h > 0):
            raise QuoteError(f"deadline_h must be a positive number of hours, got "
                             f"{self.deadline_h}")
        if not (math.isfinite(self.checkpoint_gb) and self.checkpoint_gb >= 0):
            raise QuoteError(f"checkpoint_gb must be a number >= 0, got {self.checkpoint_gb}")
        if self.dataset_gb is not None and not (math.isfinite(self.dataset_gb)
                                                and self.dataset_gb >= 0):
            raise QuoteError(f"dataset_gb must be a number >= 0, got {self.dataset_gb}")
        if self.arrival is not None:
            object.__setattr__(self, "arrival", as_utc(self.arrival))
        object.__setattr__(self, "gpu_types", tuple(self.gpu_types))

    def gpu_counts(self) -> tuple[int, ...]:
        """Counts considered: powers of two inside the range, plus its two ends."""
        counts = {self.min_gpus, self.max_gpus}
        n = 1
        while n <= self.max_gpus:
            if n >= self.min_gpus:
                counts.add(n)
            n *= 2
        return tuple(sorted(counts))


@dataclass(frozen=True)
class Quote:
    """The options for a job, best first.

    Attributes
    ----------
    spec : JobSpec
        What was quoted.
    options : DataFrame
        :data:`QUOTE_COLUMNS`; feasible options first, by ascending ``score``.
    currency : str
        Currency of ``cost``.
    warnings : list of str
        Options that were skipped and why.
    forecast_mode : str
        What the prices were (:data:`workbench.forecast.FORECAST_MODES`; ``perfect`` is the
        cube itself, a what-if).
    """

    spec: JobSpec
    options: pd.DataFrame
    currency: str
    warnings: list[str] = field(default_factory=list)
    forecast_mode: str = ""

    @property
    def recommended(self) -> dict[str, Any] | None:
        """The best feasible option as a dict, or None when no option meets the deadline."""
        ok = self.options[self.options["feasible"]]
        return None if ok.empty else ok.iloc[0].to_dict()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the spec, the recommendation, the options and warnings."""
        def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
            out = frame.copy()
            for col in ("start", "finish"):
                out[col] = [None if pd.isna(v) else pd.Timestamp(v).isoformat() for v in out[col]]
            return [{k: _plain(v) for k, v in r.items()} for r in out.to_dict("records")]

        opts = rows(self.options)
        best = next((r for r in opts if r["feasible"]), None)
        spec = {
            "app": self.spec.app, "work_samples": self.spec.work_samples, "home": self.spec.home,
            "min_gpus": self.spec.min_gpus, "max_gpus": self.spec.max_gpus,
            "deadline_h": self.spec.deadline_h,
            "arrival": self.spec.arrival.isoformat() if self.spec.arrival else None,
            "gpu_types": list(self.spec.gpu_types), "checkpoint_gb": self.spec.checkpoint_gb,
            "dataset_gb": (self.spec.checkpoint_gb if self.spec.dataset_gb is None
                           else self.spec.dataset_gb),
        }
        return {"spec": spec, "currency": self.currency, "forecast": self.forecast_mode,
                "recommended": best, "options": opts, "warnings": list(self.warnings)}


QUOTE_ORDERS: dict[str, tuple[str, str, str]] = {
    "fastest": ("finish", "earliest finish", "duration_h"),
    "cheapest": ("score", "lowest cost", "cost_if_now"),
    "cleanest": ("carbon_kg", "least carbon", "carbon_kg_if_now"),
}
"""How quotes are ordered (the CLI's ``--order``, the Quote tab's "best is"): order ->
(column of the options that meet the deadline, words, column of those that do not).
``score`` is the cost plus the carbon price times the carbon (the cost when there is no
carbon price); a late option has no start, so it is ranked by its run time or by what
starting it now would cost or emit."""


def sort_quote(options: pd.DataFrame, order: str) -> pd.DataFrame:
    """:attr:`Quote.options` by ``order`` (:data:`QUOTE_ORDERS`): the options meeting the
    deadline first, by the order's column, ties by cost; then the late ones by the order's
    late column, ties by run time. The first row is the best choice for what was asked
    when it meets the deadline."""
    col, _, late_col = QUOTE_ORDERS[order]
    ok = options["feasible"].astype(bool)
    on_time = options[ok].sort_values([col] + (["cost"] if col != "cost" else []),
                                      kind="stable", na_position="last")
    late = options[~ok].sort_values(
        [late_col] + (["duration_h"] if late_col != "duration_h" else []), kind="stable",
        na_position="last")
    return pd.concat([on_time, late]).reset_index(drop=True)


def _plain(v: Any) -> Any:
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return None if not np.isfinite(v) else float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def quote(
    scenario: Scenario,
    spec: JobSpec,
    *,
    carbon_price_per_kg: float = 0.0,
    forecast_mode: str | None = None,
    forecast_error: float = 0.0,
    seed: int = 0,
    forecast_model: str = DEFAULT_MODEL,
    occupancy: pd.DataFrame | None = None,
    restart_s: float = RESTART_S,
    power_limits: Sequence[float] = (),
) -> Quote:
    """Price every (datacenter, GPU type, GPU count, power limit) for ``spec`` and pick the
    best start.

    Parameters
    ----------
    scenario : Scenario
        Sites, pools, links, profiles and the price/carbon cube.
    spec : JobSpec
        The job.
    carbon_price_per_kg : float
        Currency per kg of CO2 added to the cost in the score (0: cheapest wins).
    forecast_mode, forecast_error, seed
        What is known about future prices (:func:`workbench.forecast.forecast` from the
        arrival slot); None (default): the honest
        :func:`workbench.forecast.default_forecast_mode`; ``"perfect"`` prices against the
        cube itself (a what-if).
    forecast_model : str
        The forecaster of mode ``"model"`` (:data:`workbench.forecast.MODELS`).
    occupancy : DataFrame, optional
        GPUs already busy per slot (``gpus_busy:<dc>/<gpu>`` columns, one row per slot).
    restart_s : float
        Seconds before the job makes progress at its start (the simulator's
        ``restart_s``, charged through :func:`workbench.outcome.move_charges`).
    power_limits : sequence of float
        A menu of GPU power limits, fractions of the maximum board power (module notes);
        empty (default): full power only.

    Returns
    -------
    Quote

    Raises
    ------
    QuoteError
        When the home datacenter or the application is unknown, or the arrival lies
        outside the horizon.
    """
    sc = scenario
    if forecast_mode is None:
        forecast_mode = default_forecast_mode(sc)
    if forecast_mode not in FORECAST_MODES:
        raise QuoteError(f"unknown forecast mode {forecast_mode!r}; use one of {FORECAST_MODES}")
    if carbon_price_per_kg < 0:
        raise QuoteError("carbon_price_per_kg must be >= 0")
    try:
        menu = [f for f in check_menu(power_limits) if f < 1.0] if power_limits else []
    except ValueError as exc:
        raise QuoteError(f"power limits: {exc}") from None
    names = [d.name for d in sc.datacenters]
    if spec.home not in names:
        raise QuoteError(f"home {spec.home!r} is not a datacenter; choose one of {names}")
    apps = sorted({p.app for p in sc.profiles})
    if spec.app not in apps:
        raise QuoteError(f"no performance profile for app {spec.app!r}; known apps: {apps}")

    arrival = spec.arrival or sc.start
    t0 = _arrival_slot(sc, arrival)
    deadline_s = None  # the deadline, seconds after the scenario start
    if spec.deadline_h is not None:
        deadline = arrival + timedelta(hours=spec.deadline_h)
        deadline_s = (deadline - sc.start).total_seconds()

    try:
        cube = horizon_cube(sc)
    except ValueError as exc:
        raise QuoteError(str(exc)) from None
    fc_model = None
    if forecast_mode == "model":
        from workbench.forecast.scenario import fit_scenario

        fc_model = fit_scenario(sc, forecast_model)
    fc = forecast(cube, t0, None, mode=forecast_mode, error=forecast_error, seed=seed,
                  model=fc_model)
    r_index = {r: i for i, r in enumerate(fc.regions)}
    price = fc.price_per_kwh  # row k is slot t0 + k
    carbon = fc.carbon_g_per_kwh
    job = _job(spec, arrival)

    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    for dc, pool, prof, n in _configurations(sc, spec, warnings):
        for limit in [None, *menu]:
            rows.append(_option(sc, spec, job, dc, pool, n, prof, t0, deadline_s, price,
                                carbon, r_index, restart_s, carbon_price_per_kg, occupancy,
                                limit))
    if not rows:
        raise QuoteError(
            f"no datacenter offers {spec.app} on GPU types {list(spec.gpu_types) or 'any'} with "
            f"{spec.min_gpus}..{spec.max_gpus} GPUs; widen the GPU range or the types"
        )
    options = pd.DataFrame(rows, columns=list(QUOTE_COLUMNS))
    options = options.sort_values(
        ["feasible", "score", "carbon_kg", "n_gpus"], ascending=[False, True, True, True],
        kind="mergesort").reset_index(drop=True)
    if not options["feasible"].any():
        warnings.append("no option finishes before the deadline; relax the deadline or allow "
                        "more GPUs")
    log.debug("quoted %s: %d options, %d feasible", spec.app, len(options),
              int(options["feasible"].sum()))
    return Quote(spec=spec, options=options, currency=sc.currency, warnings=warnings,
                 forecast_mode=forecast_mode)


def _configurations(sc: Scenario, spec: JobSpec, warnings: list[str]
                    ) -> list[tuple[Datacenter, GpuPool, perf.JobProfile, int]]:
    """Every (datacenter, pool, profile, GPU count) the job may be quoted on, in order; what
    is skipped and why goes to ``warnings``."""
    out = []
    for dc in sc.datacenters:
        if dc.name != spec.home and sc.link(spec.home, dc.name) is None:
            warnings.append(f"{dc.name}: no link from {spec.home}; skipped")
            continue
        for pool in sc.pools_at(dc.name):
            if spec.gpu_types and pool.gpu_type not in spec.gpu_types:
                continue
            try:
                prof = sc.profile(spec.app, pool.gpu_type)
            except KeyError:
                warnings.append(f"{dc.name}/{pool.gpu_type}: no profile for {spec.app}; skipped")
                continue
            out += [(dc, pool, prof, n) for n in spec.gpu_counts() if n <= pool.count]
    return out


def _arrival_slot(sc: Scenario, arrival: datetime) -> int:
    """The first slot starting at or after ``arrival`` (where the job can first run); a
    :class:`QuoteError` naming the horizon when the arrival lies outside it."""
    span = f"pass an arrival within the horizon {sc.start.isoformat()} .. {sc.end.isoformat()}"
    if arrival < sc.start:
        raise QuoteError(f"arrival {arrival.isoformat()} is before the horizon start "
                         f"{sc.start.isoformat()} of scenario {sc.name!r}; {span}")
    t0 = sc.slot_of(arrival, after=True)
    if t0 >= sc.n_slots:
        raise QuoteError(f"arrival {arrival.isoformat()} is after the last slot of scenario "
                         f"{sc.name!r}; {span}")
    return t0


def _job(spec: JobSpec, arrival: datetime) -> Job:
    """The job the simulator would run for ``spec``: its data (``checkpoint_gb``) travel
    from home on its first run away from home, as a dataset does."""
    return Job(job_id="quote", kind="training", app=spec.app, arrival=arrival, home=spec.home,
               requested_gpus=spec.min_gpus, gpu_counts=spec.gpu_counts(), batch_size=1,
               work_samples=spec.work_samples, checkpoint_gb=spec.checkpoint_gb,
               gpu_types=spec.gpu_types,
               dataset_gb=spec.checkpoint_gb if spec.dataset_gb is None else spec.dataset_gb)


def _option(
    sc: Scenario, spec: JobSpec, job: Job, dc: Datacenter, pool: GpuPool, n: int,
    prof: perf.JobProfile, t0: int, deadline_s: float | None, price: np.ndarray,
    carbon: np.ndarray, region_col: dict[str, int], restart_s: float, carbon_price: float,
    occupancy: pd.DataFrame | None, limit: float | None = None,
) -> dict[str, Any]:
    """One row of the quote: the best start of one configuration at full power, or at the
    power limit ``limit`` (a fraction of ``max_power_w``; see the module docstring)."""
    slot_s = float(sc.slot_s)
    horizon_left = price.shape[0]
    run = _limited_run(sc, job, dc, pool, n, prof, horizon_left, restart_s, limit)
    k = run.energy_kwh.size
    total_s = run.run_s
    useful_s = total_s - run.lost_s
    lo_f, hi_f = prof.step_time_interval or (1.0, 1.0)
    kind = "predicted" if prof.predicted else ("derived" if prof.derived else "fitted")
    row: dict[str, Any] = {
        "datacenter": dc.name, "region": dc.region, "gpu_type": pool.gpu_type, "n_gpus": n,
        "batch_size": int(run.batch_size[0]), "feasible": False, "start": pd.NaT,
        "finish": pd.NaT, "duration_h": total_s / 3600.0, "energy_kwh": run.total_energy_kwh,
        "cost": math.nan, "carbon_kg": math.nan, "score": math.inf, "cost_if_now": math.nan,
        "carbon_kg_if_now": math.nan, "note": "", "profile": kind,
        "duration_lo_h": (run.lost_s + lo_f * useful_s) / 3600.0,
        "duration_hi_h": (run.lost_s + hi_f * useful_s) / 3600.0,
        "power_limit_w": pool.max_power_w * (1.0 if limit is None else limit),
    }
    asked = prof.efficiency.min_batch
    batch_note = (f"batch {row['batch_size']}, below the job's batch {asked}, which does not "
                  f"fit in {n} GPUs' memory" if row["batch_size"] < asked else "")
    cols = [region_col[dc.region]]
    weights = [run.energy_kwh]
    for src, kwh in run.source_kwh:  # the sending end's half, at its price, in slot 0
        cols.append(region_col[sc.datacenter(src).region])
        weights.append(np.r_[kwh, np.zeros(k - 1)])
    # Starts s = t0 + i whose k slots lie in the horizon and whose finish (start + run_s,
    # as the simulator times it) is by the deadline.
    limit_s = float(sc.n_slots) * slot_s if deadline_s is None else deadline_s
    n_starts = horizon_left - k + 1 if run.finishes else 0
    if run.finishes and deadline_s is not None:
        n_starts = min(n_starts, int(math.floor((deadline_s - total_s) / slot_s + 1e-9)) - t0 + 1)
    n_priced = max(n_starts, 1) if run.finishes else 0  # "start now" priced even if late
    cost = np.zeros(n_priced)
    carb = np.zeros(n_priced)
    for col, w in zip(cols, weights, strict=True):
        if not n_priced:
            break
        # cost[s] = sum_k w_k * price[s + k], as a sliding dot product over all starts.
        pw = np.lib.stride_tricks.sliding_window_view(price[: n_priced + k - 1, col], k)
        cw = np.lib.stride_tricks.sliding_window_view(carbon[: n_priced + k - 1, col], k)
        cost += pw @ w
        carb += cw @ w / G_PER_KG
    if n_priced:
        row["cost_if_now"] = float(cost[0])
        row["carbon_kg_if_now"] = float(carb[0])
    if n_starts <= 0:
        # "Start now" is still priced (when the run fits the horizon) so the user sees what
        # missing the deadline would cost.
        row["note"] = "; ".join(x for x in (batch_note, f"needs {total_s / 3600:.1f} h; "
                                            "cannot finish before the deadline") if x)
        return row
    score = cost + carbon_price * carb
    if occupancy is not None:
        col_name = f"gpus_busy:{dc.name}/{pool.gpu_type}"
        if col_name in occupancy:
            busy = np.zeros(sc.n_slots)
            vals = occupancy[col_name].to_numpy(dtype=float)
            busy[: min(len(vals), sc.n_slots)] = vals[: sc.n_slots]
            free = pool.count - busy[t0:]
            fits = np.lib.stride_tricks.sliding_window_view(free[: n_starts + k - 1], k).min(
                axis=1) >= n
            score = np.where(fits, score, np.inf)
    best = int(np.argmin(score))
    if not np.isfinite(score[best]):
        row["note"] = "; ".join(x for x in (batch_note, "pool busy in every window before "
                                            "the deadline") if x)
        return row
    start = sc.start + timedelta(seconds=slot_s * (t0 + best))
    row.update({
        "feasible": True, "start": pd.Timestamp(start),
        "finish": pd.Timestamp(start + timedelta(seconds=total_s)),
        "cost": float(cost[best]), "carbon_kg": float(carb[best]), "score": float(score[best]),
    })
    notes = [batch_note] if batch_note else []
    if run.transfer_gb > 0:
        notes.append(f"moves {run.transfer_gb:g} GB from {spec.home}")
    slow_end_s = run.lost_s + hi_f * useful_s
    if slow_end_s > limit_s - (t0 + best) * slot_s:
        notes.append(f"predicted speed: at the interval's slow end ({hi_f:.2f}x) it would "
                     "miss the deadline")
    row["note"] = "; ".join(notes)
    return row


def _limited_run(sc: Scenario, job: Job, dc: Datacenter, pool: GpuPool, n: int,
                 prof: perf.JobProfile, max_slots: int, restart_s: float,
                 limit: float | None) -> outcome.UninterruptedRun:
    """:func:`workbench.outcome.uninterrupted_run` of ``job`` at full power (``limit``
    None) or at the power limit ``limit`` (the module notes: ``r_t`` times the work, the IT
    energy times ``r_P``; the factors at the GPUs' power at the start)."""
    r_p = 1.0
    if limit is not None:
        phi = float(prof.efficiency.phi(0.0))
        _, x = outcome.best_batch(prof, n, pool.gpus_per_node, phi)
        full_w = float(outcome.training_power_w(prof, n, x))
        r_t, r_p = limit_factors(pool.gpu_type, limit, full_w / n, pool.max_power_w)
        job = dataclasses.replace(job, work_samples=job.work_samples * r_t)
    run = outcome.uninterrupted_run(
        job, prof, dc.name, pool.gpu_type, n, gpus_per_node=pool.gpus_per_node,
        slot_s=float(sc.slot_s), pue=dc.pue, link=sc.link, max_slots=max_slots,
        restart_s=restart_s)
    assert run is not None  # datacenters without a link from home are skipped by quote()
    if limit is None:
        return run
    t = np.zeros(run.energy_kwh.size)
    if t.size:
        t[0] = sum(kwh for _, kwh in run.source_kwh)  # the destination half equals it
    energy = (run.energy_kwh - t) * r_p + t
    total = (run.total_energy_kwh - 2.0 * t.sum()) * r_p + 2.0 * t.sum()
    return dataclasses.replace(run, energy_kwh=energy, total_energy_kwh=float(total))


__all__ = ["QUOTE_COLUMNS", "QUOTE_ORDERS", "JobSpec", "Quote", "QuoteError", "quote",
           "sort_quote"]
