"""The flexibility envelope: how many kW each site can shed, when, and at what cost.

For each datacenter ``d`` and each start hour ``s`` of the horizon, an offer answers "hold
``d``'s grid import ``sheddable_kw`` below the plan's own peak for ``hours`` hours from
``s``, announced ``notice_h`` hours ahead": what a demand-response contract is signed on.

It is read off the plan the operator would run anyway (the spec's policy without any event,
one run; its site meter gives the planned import ``p_t``) and the levers the planners use to
keep an event (:mod:`workbench.events`):

- a training job that runs at ``d`` in the window's slots can pause there for the whole
  window when the plan finishes it early enough to absorb the delay, i.e. its planned
  finish plus the slots it ran in the window plus a restart still meets its deadline (a
  job without a deadline inside the horizon can always wait);
- an inference service that runs at ``d`` and may run at another site (its latency bound,
  a pool of its GPU type) can move there for the window where the plan leaves enough GPUs
  free there through it (each pool's free GPUs given once).

With ``s_t`` the facility power of those jobs in slot ``t`` and the battery's extra
discharge (kW), the site can hold

    limit = max_t (p_t - s_t) + m   (never below its idle load plus its must-run services)

(``m``: the half of a moved service's checkpoint transfer the site draws as it leaves)

so ``sheddable_kw = max_t p_t - limit`` (``planned_import_kw = max_t p_t``). The offer's
``extra_cost`` prices each lever: a paused job's window energy at the site's mean grid
price between the window's end and its deadline (its own planned energy per slot, a
restart's energy added) less what it would have paid in the window; a moved service's
window energy at the other site's price less this one's, and its checkpoint's transfer there
and back. A third lever is the site's battery (:meth:`Envelope.battery`): what it can
discharge beyond the plan through the window from the plan's state of charge, its cost the
recharge after the window (``battery_kw`` of the offer). Moving training jobs to other sites
and lower power limits are not counted (the offer is at most what the planner can do, not
all of it); contention when the paused jobs catch up is the plan's own finish-time slack.
How honest and how tight the envelope is, is measured by ``bench/flexibility.py``: offers
planned as events with the look-ahead (kept, no new miss) and the most the hindsight plan
sheds at the same points.

The cost curve of one point (:meth:`Envelope.cost_curve`) adds the levers cheapest per kW
first: kW shed against extra cost.

Two things an offer is not. It does not depend on the notice (recorded with it): pausing a
job or moving a service needs no preparation, so the same kW are offered at any notice the
slot clock allows. And it is read off the plan's own run (its meter, prices and finish
times as they came out): a quote made after planning the horizon, not a forecast of a
horizon still to plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from workbench.bill import site_array
from workbench.clock import SLOT_TOLERANCE
from workbench.model import Scenario
from workbench.outcome import RESTART_S_DEFAULT, move_charges
from workbench.sim.results import service_floors_kw, site_floors_kw

if TYPE_CHECKING:
    from workbench.sim import RunResult

OFFER_COLUMNS = ("datacenter", "start", "hours", "notice_hours", "planned_import_kw",
                 "sheddable_kw", "limit_kw", "extra_cost", "flexible_jobs", "battery_kw")
"""The columns of an offer (``workbench flexibility --json``'s ``offers`` and its CSV)."""


@dataclass(frozen=True)
class _Lever:
    """A job a site can shed through a window (a paused training job, a moved service): its
    facility power per slot there (kW, slots of the window) and the extra cost."""

    job_id: str
    kw: NDArray[np.float64]
    extra_cost: float
    move_kw: float = 0.0
    """What the site draws more in the slot the job leaves (a moved service's transfer half
    there, kW): the limit leaves room for it."""

    @property
    def battery(self) -> bool:
        """The site's battery (:meth:`Envelope.battery`), not a job."""
        return self.job_id.startswith("battery ")


class Envelope:
    """The envelope of one plan: built once from the plan's run, asked per point.

    Parameters
    ----------
    scenario : Scenario
    plan : DataFrame
        The run's plan rows (:attr:`workbench.sim.RunResult.plan`).
    slots : DataFrame
        The run's slot records with the site meter (:attr:`~workbench.sim.RunResult.slots`).
    jobs : DataFrame
        The run's job outcomes (:attr:`~workbench.sim.RunResult.jobs`); empty (a stored
        run keeps none): read from the plan's finish rows (:func:`plan_job_outcomes`).
    restart_s : float
        Seconds a paused job loses when it resumes.
    batteries : bool
        Whether the batteries are a lever: the plan's policy plans them
        (:func:`workbench.policies.plans_batteries`); a policy that does not leaves them
        to the sites' greedy dispatch, which holds no charge for an event.
    """

    def __init__(self, scenario: Scenario, plan: pd.DataFrame, slots: pd.DataFrame,
                 jobs: pd.DataFrame, restart_s: float, batteries: bool = True) -> None:
        sc = scenario
        self.sc = sc
        self.batteries = batteries
        self.names = [d.name for d in sc.datacenters]
        self.slot_h = sc.slot_s / 3600.0
        self.import_kw = site_array(slots, "grid_import_kw", self.names)
        self.price = site_array(slots, "price_per_kwh", self.names)
        if sc.supply.batteries:
            self.soc_kwh = site_array(slots, "soc_kwh", self.names)
            self.discharge_kwh = site_array(slots, "discharge_kwh", self.names)
        self.floor_kw = self._floors()
        self.restart_slots = restart_s / sc.slot_s
        if "slot" not in plan:  # a stored plan: the slot from its start
            plan = plan.assign(slot=_slots_of(sc, plan["slot_start"]))
        if jobs is None or jobs.empty:
            jobs = plan_job_outcomes(plan, sc)
        placed = plan[plan["n_gpus"].fillna(0) > 0]
        run = placed[placed["kind"] == "training"]
        self.rows = run[["job_id", "slot", "region", "energy_kwh"]].copy()
        self.rows["kw"] = self.rows["energy_kwh"].astype(float) / self.slot_h
        served = placed[placed["kind"] == "inference"]
        self.services = served[["job_id", "slot", "region", "energy_kwh", "n_gpus",
                                "gpu_type"]].copy()
        self.services["kw"] = self.services["energy_kwh"].astype(float) / self.slot_h
        # GPUs each pool has free per slot in the plan: where a service can go.
        self.free: dict[tuple[str, str], NDArray[np.int64]] = {}
        for p in sc.pools:
            at = placed[(placed["region"] == p.datacenter) & (placed["gpu_type"] == p.gpu_type)]
            busy = np.bincount(at["slot"].to_numpy(dtype=np.int64),
                               weights=at["n_gpus"].to_numpy(dtype=float),
                               minlength=sc.n_slots)[:sc.n_slots]
            self.free[(p.datacenter, p.gpu_type)] = p.count - busy.astype(np.int64)
        self.elsewhere = {job.job_id: (job, where)
                          for job, _a, _b, where in service_floors_kw(sc) if len(where) > 1}
        finish: dict[str, int] = {}
        deadline: dict[str, int] = {}
        for r in jobs.itertuples(index=False):
            if r.kind != "training":
                continue
            finish[str(r.job_id)] = (sc.n_slots if pd.isna(r.finish_time)
                                     else sc.slot_of(pd.Timestamp(r.finish_time), after=True))
            # No deadline inside the horizon (deadline_met None): it can always wait.
            open_ended = r.deadline_met is None or pd.isna(r.deadline_met) or pd.isna(
                r.deadline)
            deadline[str(r.job_id)] = (sc.n_slots + 10**9 if open_ended else
                                       sc.slot_of(pd.Timestamp(r.deadline)))
        self.finish, self.deadline = finish, deadline

    @classmethod
    def of_run(cls, scenario: Scenario, result: RunResult) -> Envelope:
        """The envelope of a run as planned or as stored (:func:`workbench.runs.
        load_result`: no job outcomes, its plan without slot numbers), with the restart
        seconds the run was simulated with. ``scenario`` at the run's slot length."""
        from workbench.policies import POLICY_NAMES, plans_batteries

        restart_s = result.meta.get("restart_s")
        if restart_s is None:
            restart_s = (result.meta.get("knobs") or {}).get("restart_s", RESTART_S_DEFAULT)
        policy = str(result.meta.get("policy", ""))
        return cls(scenario, result.plan, result.slots, result.jobs, float(restart_s),
                   batteries=policy in POLICY_NAMES and plans_batteries(policy))

    def _floors(self) -> NDArray[np.float64]:
        """Per slot and site, what it draws whatever runs (kW, slots x sites)."""
        floors = site_floors_kw(self.sc)
        return np.column_stack([floors[n] for n in self.names])

    def _floor(self, j: int, a: int, b: int, levers: Sequence[_Lever]) -> float:
        """The least import site ``j`` can hold through ``[a, b)`` (kW): what it draws
        whatever runs, less its battery's planned discharge and the extra ``levers`` take
        from it."""
        floor = self.floor_kw[a:b, j].copy()
        if self.sc.supply.batteries and self.batteries:
            floor -= self.discharge_kwh[a:b, j] / self.slot_h
            for x in levers:
                if x.battery:
                    floor -= x.kw
        return float(floor.max())

    def window(self, datacenter: str, start_slot: int, hours: float) -> tuple[int, int]:
        a = int(start_slot)
        return a, min(a + max(int(math.ceil(hours / self.slot_h - 1e-9)), 1), self.sc.n_slots)

    def pausable(self, datacenter: str, a: int, b: int) -> list[_Lever]:
        """The training jobs running at ``datacenter`` in slots ``[a, b)`` that the plan
        can pause there through the window without missing a deadline."""
        j = self.names.index(datacenter)
        here = self.rows[(self.rows["region"] == datacenter) & (self.rows["slot"] >= a)
                         & (self.rows["slot"] < b)]
        out = []
        for job_id, rows in here.groupby("job_id", sort=True):
            ran = len(rows)
            delay = ran + math.ceil(self.restart_slots)
            jid = str(job_id)
            if self.finish.get(jid, self.sc.n_slots) + delay > self.deadline.get(jid, -1):
                continue
            kw = np.zeros(b - a)
            kw[rows["slot"].to_numpy(dtype=np.int64) - a] = rows["kw"].to_numpy(dtype=float)
            until = min(self.deadline.get(jid, self.sc.n_slots), self.sc.n_slots)
            later = self.price[b:until, j] if until > b else self.price[b - 1:b, j]
            now = self.price[a:b, j]
            kwh = kw * self.slot_h
            restart_kwh = (float(kw[kw > 0].mean()) * self.restart_slots * self.slot_h
                           if (kw > 0).any() else 0.0)
            extra = float(kwh.sum() * later.mean() - (kwh * now).sum()
                          + restart_kwh * later.mean())
            out.append(_Lever(jid, kw, extra))
        return out

    def movable(self, datacenter: str, a: int, b: int) -> list[_Lever]:
        """The inference services running at ``datacenter`` in slots ``[a, b)`` that the plan
        leaves room for at another site they may run in (its latency bound, a pool of their
        GPU type with enough GPUs free in the plan through the window, each pool's free GPUs
        taken once): their power there, and as extra cost their window energy at the other
        site's price less this one's plus their checkpoint's transfer there and back."""
        j = self.names.index(datacenter)
        here = self.services[(self.services["region"] == datacenter)
                             & (self.services["slot"] >= a) & (self.services["slot"] < b)]
        taken: dict[tuple[str, str], int] = {}
        out = []
        for job_id, rows in here.groupby("job_id", sort=True):
            jid = str(job_id)
            if jid not in self.elsewhere:
                continue
            job, where = self.elsewhere[jid]
            n = int(rows["n_gpus"].max())
            dest = None
            for other in sorted(where, key=lambda d: (where[d], d)):
                if other == datacenter or self.sc.link(datacenter, other) is None:
                    continue
                for p in self.sc.pools_at(other):
                    key = (p.datacenter, p.gpu_type)
                    if job.allows(p.gpu_type) and int(
                            self.free[key][a:b].min()) - taken.get(key, 0) >= n:
                        dest = (other, key)
                        break
                if dest is not None:
                    break
            if dest is None:
                continue
            other, key = dest
            taken[key] = taken.get(key, 0) + n
            kw = np.zeros(b - a)
            kw[rows["slot"].to_numpy(dtype=np.int64) - a] = rows["kw"].to_numpy(dtype=float)
            # The move there and back as the simulator charges it (its data and checkpoint
            # from here, the most it can carry); half of the way out is drawn here.
            here_gpu = str(rows["gpu_type"].iloc[0])
            out_ch = move_charges(job, other, key[1], n, previous=(datacenter, here_gpu, n),
                                  checkpoint_at=datacenter, data_at=(datacenter,),
                                  pending_s=0.0, link=self.sc.link)
            back = move_charges(job, datacenter, here_gpu, n, previous=(other, key[1], n),
                                checkpoint_at=other, data_at=(other,), pending_s=0.0,
                                link=self.sc.link)
            if out_ch is None or back is None:
                continue
            left_kwh = sum(kwh for dc, kwh in out_ch.source_kwh if dc == datacenter)
            o = self.names.index(other)
            kwh = kw * self.slot_h
            extra = float((kwh * (self.price[a:b, o] - self.price[a:b, j])).sum()
                          + (out_ch.transfer_kwh + back.transfer_kwh)
                          * self.price[a:b, j].mean())
            out.append(_Lever(jid, kw, extra, move_kw=left_kwh / self.slot_h))
        return out

    def battery(self, datacenter: str, a: int, b: int) -> _Lever | None:
        """The site's battery discharging a constant ``e`` kW more than the plan through
        ``[a, b)`` (None: no battery, or none to spare). From the planned state of charge
        ``s_0`` at the window's start and the planned discharge ``d_t`` (kWh) in it::

            e = min(P - max_t d_t / h, ((s_0 - soc_min) eta - sum_t d_t) / (n h))

        (the planned charging in the window is not counted on). Its extra cost: the energy
        recharged in the day after the window at the site's mean price there, through the
        round trip, less what the shed import would have paid."""
        bat = self.sc.supply.battery_at(datacenter)
        if bat is None or not self.batteries:
            return None
        j = self.names.index(datacenter)
        h, n = self.slot_h, b - a
        soc0 = bat.soc_initial_kwh if a == 0 else float(self.soc_kwh[a - 1, j])
        planned = self.discharge_kwh[a:b, j]
        e = min(bat.power_kw - float(planned.max()) / h,
                ((soc0 - bat.soc_min_kwh) * bat.eta - float(planned.sum())) / (n * h))
        if e <= 1e-9:
            return None
        kwh = e * h * n
        later = self.price[b:min(b + int(round(24 / h)), self.sc.n_slots), j]
        later = later if later.size else self.price[b - 1:b, j]
        extra = float(kwh / bat.eta**2 * later.mean() - e * h * self.price[a:b, j].sum())
        return _Lever(f"battery {bat.name}", np.full(n, e), extra)

    def _levers(self, datacenter: str, a: int, b: int) -> list[_Lever]:
        """Every lever the site has in ``[a, b)``: paused training jobs, moved services, its
        battery."""
        bat = self.battery(datacenter, a, b)
        return (self.pausable(datacenter, a, b) + self.movable(datacenter, a, b)
                + ([] if bat is None else [bat]))

    def offer(self, datacenter: str, start_slot: int, hours: float, notice_h: float
              ) -> dict[str, Any]:
        """One offer (:data:`OFFER_COLUMNS`) for ``datacenter`` from slot ``start_slot``."""
        a, b = self.window(datacenter, start_slot, hours)
        j = self.names.index(datacenter)
        p = self.import_kw[a:b, j]
        jobs = self._levers(datacenter, a, b)
        floor = self._floor(j, a, b, jobs)
        limit = _limit(p, jobs, floor)
        peak = float(p.max())
        bat = [x for x in jobs if x.battery]
        return {"datacenter": datacenter,
                "start": pd.Timestamp(self.sc.slot_starts()[a]).isoformat(),
                "hours": hours, "notice_hours": notice_h, "planned_import_kw": peak,
                "sheddable_kw": max(peak - limit, 0.0), "limit_kw": min(limit, peak),
                "extra_cost": float(sum(x.extra_cost for x in jobs)) if peak > limit else 0.0,
                "flexible_jobs": len(jobs) - len(bat),
                "battery_kw": float(bat[0].kw[0]) if bat and peak > limit else 0.0}

    def cost_curve(self, datacenter: str, start_slot: int, hours: float
                   ) -> list[tuple[float, float]]:
        """``(kW shed, extra cost)`` points, the levers (paused jobs, moved services) added
        cheapest per kW first (the first point ``(0, 0)``)."""
        a, b = self.window(datacenter, start_slot, hours)
        j = self.names.index(datacenter)
        p = self.import_kw[a:b, j]
        peak = float(p.max())
        jobs = sorted(self._levers(datacenter, a, b),
                      key=lambda x: (x.extra_cost / max(float(x.kw.max()), 1e-9), x.job_id))
        out = [(0.0, 0.0)]
        for k in range(1, len(jobs) + 1):
            limit = _limit(p, jobs[:k], self._floor(j, a, b, jobs[:k]))
            out.append((max(peak - limit, 0.0), float(sum(x.extra_cost for x in jobs[:k]))))
        return out


def _limit(planned_kw: NDArray[np.float64], levers: Sequence[_Lever], floor: float) -> float:
    """The import limit a site holds with ``levers`` shed: ``max_t (p_t - s_t)``, never
    below its floor, plus the room its moved services' leaving transfers take."""
    shed = np.sum([x.kw for x in levers], axis=0) if levers else 0.0
    return max(float(np.max(planned_kw - shed)), floor) + sum(x.move_kw for x in levers)


def _slots_of(sc: Scenario, times: pd.Series) -> NDArray[np.int64]:
    """The slot index of each UTC time (a slot's start)."""
    t = pd.to_datetime(times, utc=True)
    start = pd.Timestamp(sc.start)
    start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
    return np.asarray(np.floor((t - start).dt.total_seconds() / sc.slot_s + SLOT_TOLERANCE),
                      dtype=np.int64)


def plan_job_outcomes(plan: pd.DataFrame, sc: Scenario) -> pd.DataFrame:
    """What the envelope needs of each training job's outcome, from a plan alone (a stored
    run keeps no job outcomes): ``job_id``, ``kind``, ``finish_time`` (the end of its
    finish row's slot: NaT when it did not finish), ``deadline`` and ``deadline_met``
    (None without a deadline, or unfinished with its deadline after the horizon), as
    :attr:`workbench.sim.RunResult.jobs` has them."""
    fin = plan[plan["action"] == "finish"]
    done = dict(zip(fin["job_id"].astype(str), pd.to_datetime(fin["slot_end"], utc=True),
                    strict=True))
    end = pd.Timestamp(sc.end)
    end = end.tz_localize("UTC") if end.tzinfo is None else end
    rows = []
    for j in sc.jobs:
        if not j.is_training:
            continue
        when = done.get(str(j.job_id))
        deadline = None if j.deadline is None else pd.Timestamp(j.deadline)
        met: bool | None = None
        if deadline is not None and when is not None:
            met = bool(when <= deadline)
        elif deadline is not None and deadline <= end:
            met = False
        rows.append({"job_id": str(j.job_id), "kind": "training",
                     "finish_time": pd.NaT if when is None else when,
                     "deadline": deadline, "deadline_met": met})
    return pd.DataFrame(rows, columns=["job_id", "kind", "finish_time", "deadline",
                                       "deadline_met"])


def start_slots(sc: Scenario, hours: float, every_h: float = 1.0,
                first_h: float = 0.0, last_h: float | None = None) -> list[int]:
    """The window starts: every ``every_h`` hours from ``first_h`` to ``last_h`` (default:
    the last start whose window fits the horizon)."""
    slot_h = sc.slot_s / 3600.0
    n_win = max(int(math.ceil(hours / slot_h - 1e-9)), 1)
    stop = sc.n_slots - n_win if last_h is None else min(
        int(round(last_h / slot_h)), sc.n_slots - n_win)
    step = max(int(round(every_h / slot_h)), 1)
    return list(range(max(int(round(first_h / slot_h)), 0), stop + 1, step))


def offers(envelope: Envelope, hours: float, notice_h: float,
           datacenters: Sequence[str] | None = None, starts: Sequence[int] | None = None,
           progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Every offer (:data:`OFFER_COLUMNS`), by datacenter then start."""
    sc = envelope.sc
    names = list(datacenters) if datacenters else envelope.names
    unknown = sorted(set(names) - set(envelope.names))
    if unknown:
        raise ValueError(f"unknown datacenter(s) {', '.join(unknown)}; the scenario has "
                         f"{', '.join(envelope.names)}")
    slots = list(starts) if starts is not None else start_slots(sc, hours)
    rows = []
    total = len(names) * len(slots)
    for i, d in enumerate(names):
        for s in slots:
            rows.append(envelope.offer(d, s, hours, notice_h))
        if progress is not None:
            progress((i + 1) * len(slots), total)
    return pd.DataFrame(rows, columns=list(OFFER_COLUMNS))


__all__ = ["OFFER_COLUMNS", "Envelope", "offers", "plan_job_outcomes", "start_slots"]
