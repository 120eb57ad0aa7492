"""Baseline policies, run through the same simulator as the Lyapunov scheduler.

Each is a small class with keyword knobs, ``reset(scenario)`` and ``decide(state, forecast)``
(the :class:`~workbench.policies.base.Policy` protocol). All of them place every inference
service in every slot first: where it ran last slot if it still fits, else its home, else the
lowest-latency datacenter within its latency bound. Training jobs then share what is left.

- :class:`AsapHome` (``asap-home``): price- and carbon-blind. A training job starts at
  arrival in its home datacenter with the requested GPUs and batch size, first come first
  served when the pools are full (running jobs keep their GPUs, waiting jobs fill the rest in
  arrival order), and never moves. The "before" of the seed's 36% claim.
- :class:`CheapestAtArrival` (``cheapest-at-arrival``): when a job arrives it picks the
  datacenter with the lowest mean forecast price (times PUE) over its expected run, then
  behaves as ``asap-home`` there.
- :class:`WaitForCheap` (``wait-for-cheap``): home, requested GPUs and batch; time shifting
  only: it runs in the cheapest forecast slots that still finish before the deadline with a
  safety margin, and runs at once when the slack is gone.
- :class:`CarbonScaling` (``carbon-scaling``): CarbonScaler-style (Hanafy et al., SIGMETRICS
  '24). Home datacenter; per slot the GPU count comes from a greedy plan over the window to
  the deadline that buys progress where the marginal progress per kg CO2 is highest: more
  GPUs when carbon is low, fewer (or none) when high.
- :class:`GoodputOnly` (``goodput-only``): Pollux-style. Maximise the total progress (sum of
  ECU as fractions of each job's work) across all datacenters under pool capacity, blind to
  price and carbon; batch sizes are the ECU-optimal ones.

Without a deadline, ``wait-for-cheap`` and ``carbon-scaling`` take a window of
``default_slack_h`` hours after arrival (never past the horizon).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import timedelta

import numpy as np
from numpy.typing import NDArray

from workbench import outcome
from workbench.forecast import Forecast
from workbench.model import Job, ScenarioView
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    JobState,
    NoHindsightBound,
    Placement,
    SlotOptions,
    SlotState,
    slot_options,
)
from workbench.units import G_PER_KG

__all__ = ["AsapHome", "CarbonScaling", "CheapestAtArrival", "GoodputOnly", "WaitForCheap"]


def _check_knobs(restart_s: float, margin: float = 0.0, default_slack_h: float = 1.0) -> None:
    if not (math.isfinite(restart_s) and restart_s >= 0):
        raise ValueError(f"restart_s must be >= 0 seconds, got {restart_s!r}")
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be >= 0 (a fraction, e.g. 0.25), got {margin!r}")
    if not (math.isfinite(default_slack_h) and default_slack_h > 0):
        raise ValueError(f"default_slack_h must be > 0 hours, got {default_slack_h!r}")


class FreeGpus:
    """Free GPUs per pool during one decision."""

    def __init__(self, scenario: ScenarioView) -> None:
        self.sc = scenario
        self.free = {(p.datacenter, p.gpu_type): p.count for p in scenario.pools}

    def pick(self, datacenter: str, job: Job, n: int, prefer: str | None = None) -> str | None:
        """GPU type of an allowed pool in ``datacenter`` with ``n`` free GPUs (the preferred
        type first, then the pool with most free GPUs), or None."""
        fits = [
            g for (d, g), free in self.free.items()
            if d == datacenter and job.allows(g) and free >= n
        ]
        if not fits:
            return None
        if prefer in fits:
            return prefer
        return max(fits, key=lambda g: (self.free[(datacenter, g)], g))

    def take(self, datacenter: str, gpu_type: str, n: int) -> None:
        assert self.free[(datacenter, gpu_type)] >= n
        self.free[(datacenter, gpu_type)] -= n


def _reachable(sc: ScenarioView, js: JobState, datacenter: str) -> bool:
    """A job may run in ``datacenter`` unless its checkpoint is elsewhere with no link."""
    last = js.last_datacenter
    return last is None or last == datacenter or sc.link(last, datacenter) is not None


def place_inference(state: SlotState, free: FreeGpus, placements: dict[str, Placement]) -> None:
    """Place every inference service: last place, else home, else lowest latency."""
    sc = state.scenario
    services = sorted(
        (js for js in state.jobs if not js.job.is_training),
        key=lambda js: (js.job.arrival, js.job.job_id),
    )
    for js in services:
        job = js.job
        bound = job.max_latency_ms if job.max_latency_ms is not None else math.inf
        near = sorted(
            (d.name for d in sc.datacenters if sc.latency_ms(job.home, d.name) <= bound),
            key=lambda d: (d != job.home, sc.latency_ms(job.home, d), d),
        )
        if js.placement is not None and js.placement.datacenter in near:
            near.remove(js.placement.datacenter)
            near.insert(0, js.placement.datacenter)
        prefer = js.placement.gpu_type if js.placement is not None else None
        for dc in near:
            if not _reachable(sc, js, dc):
                continue
            g = free.pick(dc, job, job.requested_gpus, prefer)
            if g is not None:
                free.take(dc, g, job.requested_gpus)
                placements[job.job_id] = Placement(dc, g, job.requested_gpus, job.batch_size)
                break


def _home_site(sc: ScenarioView, job: Job) -> str:
    """The job's home, or (if no allowed pool there is big enough) the nearest linked
    datacenter that has one."""
    def fits(dc: str) -> bool:
        return any(job.allows(p.gpu_type) and p.count >= job.requested_gpus
                   for p in sc.pools_at(dc))

    if fits(job.home):
        return job.home
    others = sorted((d.name for d in sc.datacenters if d.name != job.home),
                    key=lambda d: (sc.latency_ms(job.home, d), d))
    return next((d for d in others if fits(d) and math.isfinite(sc.latency_ms(job.home, d))),
                job.home)


def training_jobs(state: SlotState) -> list[JobState]:
    return [js for js in state.jobs if js.job.is_training]


def fifo(jobs: Iterable[JobState]) -> list[JobState]:
    """Running jobs first (they keep their GPUs), then the rest in arrival order."""
    return sorted(jobs, key=lambda js: (js.placement is None, js.job.arrival, js.job.job_id))


def place_at(
    free: FreeGpus, placements: dict[str, Placement], js: JobState, dc: str, n: int, m: int
) -> bool:
    prefer = js.placement.gpu_type if js.placement is not None else None
    g = free.pick(dc, js.job, n, prefer)
    if g is None:
        return False
    free.take(dc, g, n)
    placements[js.job.job_id] = Placement(dc, g, n, m)
    return True


def slot_rate(sc: ScenarioView, js: JobState, dc: str, n: int, m: int) -> float:
    """Predicted fraction of the job's work done per full slot at ``(dc, n, m)``:
    ``ECU * throughput_scale * slot_s / W`` on the *slowest* allowed GPU type there (the
    job may land on any of them), 0 when no allowed pool holds ``n`` GPUs."""
    rates = []
    for pool in sc.pools_at(dc):
        if not js.job.allows(pool.gpu_type) or pool.count < n:
            continue
        prof = sc.profile(js.job.app, pool.gpu_type)
        # One loss-free full slot of the one slot model, at the online estimates.
        out = outcome.slot_outcome(js.job, slot_s=float(sc.slot_s), pue=1.0,
                                   remaining=math.inf, profile=prof, n_gpus=n, batch_size=m,
                                   speed=js.throughput_scale, phi=js.phi,
                                   gpus_per_node=pool.gpus_per_node)
        rates.append(out.progress)
    return min(rates, default=0.0)


def deadline_window(state: SlotState, js: JobState, horizon: int, default_slack_h: float) -> int:
    """Whole slots from now until the job's deadline (or arrival + default slack),
    never beyond the forecast horizon."""
    job = js.job
    due = job.deadline if job.deadline is not None else job.arrival + timedelta(
        hours=default_slack_h)
    slots = math.floor((due - state.time).total_seconds() / state.scenario.slot_s)
    return max(0, min(slots, horizon))


class _AtHome(NoHindsightBound):
    """Baselines that keep each training job at its home site (:func:`_home_site`)."""

    def __init__(self, *, restart_s: float) -> None:
        _check_knobs(restart_s)
        self.restart_s = restart_s
        self._site: dict[str, str] = {}

    def reset(self, scenario: ScenarioView) -> None:  # noqa: ARG002
        # Jobs are learnt as they arrive (a policy never sees future arrivals).
        self._site = {}

    def _home(self, sc: ScenarioView, job: Job) -> str:
        site = self._site.get(job.job_id)
        if site is None:
            site = self._site[job.job_id] = _home_site(sc, job)
        return site


class _WithinSlack(_AtHome):
    """Home baselines that plan over the window to the deadline with a safety margin."""

    def __init__(self, *, margin: float, default_slack_h: float, restart_s: float) -> None:
        _check_knobs(restart_s, margin, default_slack_h)
        super().__init__(restart_s=restart_s)
        self.margin = margin
        self.default_slack_h = default_slack_h


class AsapHome(_AtHome):
    """As soon as possible at home, requested GPUs and batch, FIFO; price and carbon blind.

    Parameters
    ----------
    restart_s : float
        Accepted for a uniform knob set; this policy never weighs restart losses.
    """

    name = "asap-home"

    def __init__(self, *, restart_s: float = RESTART_S_DEFAULT) -> None:
        super().__init__(restart_s=restart_s)

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:  # noqa: ARG002
        free = FreeGpus(state.scenario)
        placements: dict[str, Placement] = {}
        place_inference(state, free, placements)
        for js in fifo(training_jobs(state)):
            job = js.job
            place_at(free, placements, js, self._home(state.scenario, job), job.requested_gpus,
                      job.batch_size)
        return Allocation(placements=placements)


class CheapestAtArrival(NoHindsightBound):
    """At arrival, the datacenter with the cheapest mean forecast price over the expected run.

    The expected run is ``ceil(remaining / rate)`` slots at the requested GPUs and batch,
    and the score of a datacenter ``d`` is ``PUE_d * mean(price_forecast[0:k, region_d])``
    (the price of a kWh of IT energy). The job then stays there, first come first served.
    """

    name = "cheapest-at-arrival"

    def __init__(self, *, restart_s: float = RESTART_S_DEFAULT) -> None:
        _check_knobs(restart_s)
        self.restart_s = restart_s
        self._site: dict[str, str] = {}

    def reset(self, scenario: ScenarioView) -> None:
        self._site = {}

    def _choose(self, state: SlotState, js: JobState, forecast: Forecast) -> str:
        sc = state.scenario
        job = js.job
        candidates: list[tuple[float, bool, str]] = []
        for dc in sc.datacenters:
            if not _reachable(sc, js, dc.name):
                continue
            rate = slot_rate(sc, js, dc.name, job.requested_gpus, job.batch_size)
            if rate <= 0:
                continue
            k = min(max(math.ceil(js.remaining / rate), 1), forecast.price_per_kwh.shape[0])
            mean_price = float(np.mean(forecast.price_per_kwh[:k,
                                                              forecast.region_index(dc.region)]))
            candidates.append((dc.pue * mean_price, dc.name != job.home, dc.name))
        return min(candidates)[2] if candidates else _home_site(sc, job)

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        free = FreeGpus(state.scenario)
        placements: dict[str, Placement] = {}
        place_inference(state, free, placements)
        for js in fifo(training_jobs(state)):
            job = js.job
            if job.job_id not in self._site:
                self._site[job.job_id] = self._choose(state, js, forecast)
            place_at(free, placements, js, self._site[job.job_id], job.requested_gpus,
                      job.batch_size)
        return Allocation(placements=placements)


class WaitForCheap(_WithinSlack):
    """Time shifting only: home, requested GPUs and batch, in the cheapest slots that still
    finish before the deadline.

    Each slot, for a job with remaining work ``R`` and per-slot rate ``r`` (the restart
    loss charged in every slot, to be safe)::

        need = ceil(R * (1 + margin) / (r * (slot_s - restart_s) / slot_s))
        w    = whole slots until the deadline (or arrival + default_slack_h)

    If ``w <= need`` the job runs now; otherwise it runs now only if the current slot is
    among the ``need`` cheapest of the next ``w`` forecast slots (earlier slots win ties).

    Parameters
    ----------
    margin : float
        Safety margin on the work still to do (0.5 = plan for 50% more): slots lost to full
        pools (every job wants the same cheap slots) eat into the slack.
    default_slack_h : float
        Window for jobs without a deadline, hours after arrival.
    restart_s : float
        Seconds lost on every start or resume.
    """

    name = "wait-for-cheap"

    def __init__(self, *, margin: float = 0.5, default_slack_h: float = 24.0,
                 restart_s: float = RESTART_S_DEFAULT) -> None:
        super().__init__(margin=margin, default_slack_h=default_slack_h, restart_s=restart_s)

    def _slots(self, state: SlotState, js: JobState, horizon: int) -> tuple[int, int] | None:
        """The job's window ``w`` (whole slots to its deadline, within ``horizon``) and the
        slots it needs at home with the margin; None when it makes no progress there."""
        sc = state.scenario
        job = js.job
        rate = slot_rate(sc, js, self._home(sc, job), job.requested_gpus, job.batch_size)
        rate *= max(sc.slot_s - self.restart_s, 1.0) / sc.slot_s
        w = deadline_window(state, js, horizon, self.default_slack_h)
        if rate <= 0:
            return None
        return w, math.ceil(js.remaining * (1.0 + self.margin) / rate)

    def _signal(self, state: SlotState, js: JobState, forecast: Forecast
                ) -> NDArray[np.float64] | None:
        """What the job waits for, per forecast slot (lower is better): its home's price."""
        sc = state.scenario
        dc = self._home(sc, js.job)
        return forecast.price_per_kwh[:, forecast.region_index(sc.datacenter(dc).region)]

    def _usable(self, now: float) -> bool:
        """Whether this slot's signal lets the job run in it at all (any price does)."""
        return True

    def _wants(self, state: SlotState, js: JobState, forecast: Forecast) -> tuple[bool, int]:
        """Whether the job wants this slot, and its slack in slots (for priority): it runs
        now when this slot is among the ``need`` best of its window by :meth:`_signal`
        (earliest first among equals), or when it has no signal or no slack."""
        signal = self._signal(state, js, forecast)
        if signal is None:
            return True, 0
        got = self._slots(state, js, signal.shape[0])
        if got is None:
            return True, 0
        w, need = got
        if w <= need:
            return True, w - need
        best = np.lexsort((np.arange(w), signal[:w]))[:need]
        return bool(np.any(best == 0) and self._usable(float(signal[0]))), w - need

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        free = FreeGpus(state.scenario)
        placements: dict[str, Placement] = {}
        place_inference(state, free, placements)
        wanting = []
        for js in training_jobs(state):
            wants, slack = self._wants(state, js, forecast)
            if wants:
                wanting.append((slack, js.placement is None, js.job.arrival, js.job.job_id, js))
        for *_, js in sorted(wanting, key=lambda x: x[:4]):
            job = js.job
            place_at(free, placements, js, self._home(state.scenario, job), job.requested_gpus,
                      job.batch_size)
        return Allocation(placements=placements)


def _home_rows(opts: SlotOptions, k: int, dc: str) -> np.ndarray:
    rows = np.flatnonzero((opts.job_index == k) & (opts.datacenter == dc))
    return rows


class CarbonScaling(_WithinSlack):
    """CarbonScaler-style GPU scaling by marginal carbon, home datacenter.

    For a job with per-slot progress ``p(n)`` and energy ``e(n)`` on each GPU count ``n`` of
    its menu (ECU-optimal batch, from :func:`slot_options`), and forecast carbon ``c[s]`` for
    the ``w`` slots to its deadline, the marginal step ``n_i -> n_{i+1}`` in slot ``s`` buys
    ``dp = p(n_{i+1}) - p(n_i)`` at ``dc = (e(n_{i+1}) - e(n_i)) * c[s]``. Steps are taken in
    decreasing ``dp / dc`` (made non-increasing along each slot's menu so that steps stay in
    order) until ``sum dp >= remaining * (1 + margin)``. The GPU count of slot 0 is what the
    job asks for now. Once the window no longer holds ``remaining * (1 + margin)`` at the
    requested GPU count, the job scales up to its most productive count (the deadline guard).

    Parameters
    ----------
    margin, default_slack_h, restart_s
        As for :class:`WaitForCheap`.
    """

    name = "carbon-scaling"

    def __init__(self, *, margin: float = 0.25, default_slack_h: float = 24.0,
                 restart_s: float = RESTART_S_DEFAULT) -> None:
        super().__init__(margin=margin, default_slack_h=default_slack_h, restart_s=restart_s)

    def _plan_now(
        self, remaining: float, progress: np.ndarray, energy: np.ndarray, carbon: np.ndarray,
        p_requested: float,
    ) -> tuple[int, int]:
        """Index into the (sorted) menu for this slot (-1: pause) and the slack in slots."""
        w = carbon.size
        target = remaining * (1.0 + self.margin)
        p_safe = max(p_requested, 1e-12)
        slack = int(w - target / p_safe)
        if w == 0 or w * p_safe <= target:
            # Too little slack left to finish at the requested size: scale up now.
            return int(np.argmax(progress)), slack
        dp = np.diff(np.concatenate(([0.0], progress)))
        de = np.diff(np.concatenate(([0.0], energy)))
        # score[s, i]: progress per kg CO2 of the i-th step in slot s.
        score = dp[None, :] / np.maximum(de[None, :] * carbon[:, None] / G_PER_KG, 1e-12)
        score[:, dp <= 0] = -np.inf
        score = np.minimum.accumulate(score, axis=1)
        s_idx, i_idx = np.meshgrid(np.arange(w), np.arange(dp.size), indexing="ij")
        order = np.lexsort((i_idx.ravel(), s_idx.ravel(), -score.ravel()))
        gains = np.broadcast_to(dp, score.shape).ravel()[order]
        take = np.searchsorted(np.cumsum(gains), target) + 1
        chosen = order[:take]
        level_now = int(np.sum(s_idx.ravel()[chosen] == 0))
        return level_now - 1, slack

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        sc = state.scenario
        free = FreeGpus(sc)
        placements: dict[str, Placement] = {}
        place_inference(state, free, placements)
        prices = {r: float(forecast.price_per_kwh[0, i]) for i, r in enumerate(forecast.regions)}
        carbons = {r: float(forecast.carbon_g_per_kwh[0, i])
                   for i, r in enumerate(forecast.regions)}
        train = training_jobs(state)
        sub = SlotState(scenario=sc, t=state.t, time=state.time, jobs=tuple(train),
                        resize_s=state.resize_s)
        opts = slot_options(sub, prices, carbons, restart_s=self.restart_s)
        horizon = forecast.carbon_g_per_kwh.shape[0]
        wishes = []
        for k, js in enumerate(train):
            dc = self._home(sc, js.job)
            rows = _home_rows(opts, k, dc)
            if rows.size == 0:
                continue
            # Per GPU count, the pool option with the most progress.
            menu: dict[int, int] = {}
            for i in rows:
                n = int(opts.n_gpus[i])
                if n not in menu or opts.progress[i] > opts.progress[menu[n]]:
                    menu[n] = int(i)
            counts = sorted(menu)
            idx = np.array([menu[n] for n in counts])
            w = deadline_window(state, js, horizon, self.default_slack_h)
            region = sc.datacenter(dc).region
            carbon = forecast.carbon_g_per_kwh[:w, forecast.region_index(region)]
            req = counts.index(js.job.requested_gpus) if js.job.requested_gpus in counts else -1
            level, slack = self._plan_now(js.remaining, opts.progress[idx],
                                          opts.energy_kwh[idx], carbon,
                                          float(opts.progress[idx][req]))
            if level >= 0:
                # The planned count on its best pool, then its other pools, then smaller
                # counts: each option keeps its own GPU type and batch size.
                ok = rows[opts.n_gpus[rows] <= counts[level]]
                ok = ok[np.lexsort((-opts.progress[ok], -opts.n_gpus[ok]))]
                priority = (slack, js.placement is None, js.job.arrival, js.job.job_id)
                wishes.append((priority, js, ok))
        for _, js, ok in sorted(wishes, key=lambda x: x[0]):
            for i in ok:
                key = (str(opts.datacenter[i]), str(opts.gpu_type[i]))
                if free.free[key] >= opts.n_gpus[i]:
                    free.take(*key, int(opts.n_gpus[i]))
                    placements[js.job.job_id] = opts.placement(int(i))
                    break
        return Allocation(placements=placements)


class GoodputOnly(NoHindsightBound):
    """Pollux-style: maximise the summed progress of all jobs under capacity, anywhere.

    Greedy on the options of :func:`slot_options` (ECU-optimal batch, restart and transfer
    losses included): first every job, in decreasing order of its best progress per GPU,
    gets the option with the most progress per GPU that fits; then jobs grow to larger
    options in the same datacenter while the extra progress per extra GPU is positive,
    best ratio first. Price and carbon play no part.
    """

    name = "goodput-only"

    def __init__(self, *, restart_s: float = RESTART_S_DEFAULT) -> None:
        _check_knobs(restart_s)
        self.restart_s = restart_s

    def reset(self, scenario: ScenarioView) -> None:
        return None

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        sc = state.scenario
        free = FreeGpus(sc)
        placements: dict[str, Placement] = {}
        place_inference(state, free, placements)
        train = training_jobs(state)
        if not train:
            return Allocation(placements=placements)
        zeros: Mapping[str, float] = {r: 0.0 for r in forecast.regions}
        sub = SlotState(scenario=sc, t=state.t, time=state.time, jobs=tuple(train),
                        resize_s=state.resize_s)
        opts = slot_options(sub, zeros, zeros, restart_s=self.restart_s)
        per_gpu = opts.progress / np.maximum(opts.n_gpus, 1)
        chosen: dict[int, int] = {}
        best_of = {}
        for k in range(len(train)):
            rows = np.flatnonzero(opts.job_index == k)
            if rows.size:
                best_of[k] = float(per_gpu[rows].max())
        for k in sorted(best_of, key=lambda k: (-best_of[k], train[k].job.job_id)):
            rows = np.flatnonzero(opts.job_index == k)
            for i in rows[np.lexsort((opts.n_gpus[rows], -per_gpu[rows]))]:
                key = (str(opts.datacenter[i]), str(opts.gpu_type[i]))
                if opts.progress[i] > 0 and free.free[key] >= opts.n_gpus[i]:
                    free.take(*key, int(opts.n_gpus[i]))
                    chosen[k] = int(i)
                    break
        # Grow: best extra progress per extra GPU first, within the chosen pool.
        while True:
            best: tuple[float, int, int] | None = None
            for k, i in chosen.items():
                key = (str(opts.datacenter[i]), str(opts.gpu_type[i]))
                rows = np.flatnonzero((opts.job_index == k) & (opts.datacenter == key[0])
                                      & (opts.gpu_type == key[1]) & (opts.n_gpus > opts.n_gpus[i]))
                for row in rows:
                    extra = int(opts.n_gpus[row] - opts.n_gpus[i])
                    gain = float(opts.progress[row] - opts.progress[i])
                    if gain > 1e-12 and free.free[key] >= extra:
                        ratio = gain / extra
                        if best is None or ratio > best[0]:
                            best = (ratio, k, int(row))
            if best is None:
                break
            _, k, up = best
            i = chosen[k]
            key = (str(opts.datacenter[i]), str(opts.gpu_type[i]))
            free.take(*key, int(opts.n_gpus[up] - opts.n_gpus[i]))
            chosen[k] = up
        for k, i in chosen.items():
            placements[train[k].job.job_id] = opts.placement(i)
        return Allocation(placements=placements)
