"""Migration that pays for its round trip: one rule, shared by the online policies.

A move of job ``j`` from its checkpoint's datacenter to ``d'`` costs, one way,
``C1 = w_j * r_j * lost_s / slot_s + transfer_kwh * price_d'`` in the policy's objective units:
``lost_s`` the seconds lost (transfer and restart), ``r_j`` its progress per slot and ``w_j``
its value of progress (``V``-weighted queue of the Lyapunov policy, the work dual of the
look-ahead plan); ``transfer_kwh = GB moved * transfer_energy_kwh_per_gb``. A move pays when::

    g * dwell > C1 * trips,     trips = 1 if the job finishes within the dwell there, else 2

with ``g`` the move's steady gain per slot over the best way of staying (running where the
checkpoint is, or pausing: worth 0) and ``dwell`` the slots it is expected to stay: the
smaller of the slots it needs to finish there, the slots left before its deadline and the
run of forecast slots, from now, in which the destination stays cheaper than the origin
(:func:`advantage_slots`). No job is moved again within ``min_dwell_slots`` of its last move
(the stated horizon a move must hold): a training job pays a restart for each move; an
inference service loses no work in a move, so without the dwell a price dip of one slot
would move it there and back (only a service that cannot stay where it is moves sooner).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from workbench.events import GridEvent, Horizon
from workbench.model import Link
from workbench.policies.base import SlotOptions


class ScenarioLike(Protocol):
    """The static fact the rule reads: the link between two datacenters."""

    def link(self, a: str, b: str) -> Link | None: ...


def transfer_kwh(scenario: ScenarioLike, opts: SlotOptions) -> NDArray[np.float64]:
    """Transfer energy per option, kWh: GB moved times the link's kWh per GB (0 if no move).

    GB moved is the option's ``transfer_gb`` (its dataset on a first placement away from
    home, else its checkpoint); the link joins where the data is and the option's datacenter.
    """
    gb = opts.transfer_gb
    out = np.zeros(len(opts))
    for k in np.flatnonzero(opts.moves).tolist():
        js = opts.jobs[int(opts.job_index[k])]
        src = str(opts.transfer_from[k]) or (js.last_datacenter or js.job.home)
        link = scenario.link(src, str(opts.datacenter[k]))
        size = float(gb[k])
        out[k] = 0.0 if link is None else size * link.transfer_energy_kwh_per_gb
    return out


def one_way_move_cost(opts: SlotOptions, value_per_progress: NDArray[np.float64],
                      rate_per_slot: NDArray[np.float64], energy_value: NDArray[np.float64],
                      slot_s: float) -> NDArray[np.float64]:
    """``C1`` per option (0 for an option that does not move), in objective units.

    ``value_per_progress`` and ``rate_per_slot`` are per option (the job's value of a unit of
    progress, its steady progress per slot there); ``energy_value`` is the transfer energy's
    weight in objective units (e.g. ``V * transfer_kwh * price``). The seconds lost are the
    option's ``lost_s`` (transfer and restart, within the slot) or its whole transfer time
    when that spans several slots.
    """
    lost_s = np.maximum(opts.lost_s, opts.transfer_s)
    lost = lost_s / slot_s * rate_per_slot * value_per_progress
    return np.where(opts.moves, lost + energy_value, 0.0)


def advantage_slots(price: NDArray[np.float64], origin: NDArray[np.int64],
                    dest: NDArray[np.int64]) -> NDArray[np.float64]:
    """Forecast slots from now in which ``dest`` stays cheaper than ``origin`` (at least 1).

    ``price`` has shape (slots ahead, datacenters), row 0 the current slot; ``origin`` and
    ``dest`` are datacenter indices per option. The count stops at the first slot where the
    destination is not cheaper: that is when a price-chasing job would want to go back.
    """
    if price.shape[0] == 0 or origin.size == 0:
        return np.ones(origin.size)
    cheaper = price[:, dest] < price[:, origin]          # (slots, options)
    run = np.argmin(np.vstack([cheaper, np.zeros((1, origin.size), dtype=bool)]), axis=0)
    return np.maximum(run, 1).astype(float)


def held_gain(price: NDArray[np.float64], origin: NDArray[np.int64],
              dest: NDArray[np.int64], horizon: int) -> NDArray[np.float64]:
    """``sum_{k < H} (price[k, origin] - price[k, dest])`` per option: what a move saves
    per unit of energy over the ``H = horizon`` slots from now it is held (its minimum
    dwell; at least 1, at most the forecast's length); > 0 when the destination is cheaper
    on the whole over that time, not merely now."""
    if price.shape[0] == 0 or origin.size == 0:
        return np.zeros(origin.size)
    h = int(min(max(horizon, 1), price.shape[0]))
    return np.asarray((price[:h, origin] - price[:h, dest]).sum(axis=0), dtype=float)


def moves_that_pay(
    opts: SlotOptions,
    coef: NDArray[np.float64],
    one_way: NDArray[np.float64],
    dwell_slots: NDArray[np.float64],
    finishes: NDArray[np.bool_],
    recently_moved: NDArray[np.bool_],
    held: NDArray[np.bool_] | None = None,
) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """Keep mask over the options and the best stay value per job.

    Parameters
    ----------
    coef : (K,)
        Objective weight of each option in the slot (larger is better); a move's weight
        already carries its one-way loss ``one_way``.
    one_way : (K,)
        ``C1`` per option (0 when it does not move).
    dwell_slots, finishes : (K,)
        Expected dwell at the option's datacenter, and whether the job finishes within it.
    recently_moved : (J,)
        Jobs moved within their minimum dwell: none of their moves is kept (a service that
        cannot stay where it is keeps them: it must be placed).
    held : (K,), optional
        Per option, whether its destination is cheaper than where the job is over the
        minimum dwell it will be held there (:func:`held_gain` > 0): an inference service's
        move is kept only then (its one-way cost is the transfer alone, so a dip of one
        slot would otherwise pay). None where carbon weighs in the policy's objective
        (a budget or a carbon price): the minimum dwell alone holds a service then.

    Returns
    -------
    keep : bool (K,)
        False for a move whose round trip costs more than it saves (staying stays possible).
    stay_best : float (J,)
        Best weight of staying (``>= 0`` for training jobs, which may pause; ``-inf`` when
        an inference service has no option without a move).
    """
    n_jobs = len(opts.jobs)
    keep = np.ones(len(opts), dtype=bool)
    training = np.array([js.job.is_training for js in opts.jobs], dtype=bool)
    stay_best = np.where(training, 0.0, -np.inf)
    if not len(opts):
        return keep, stay_best
    stay = ~opts.moves
    np.maximum.at(stay_best, opts.job_index[stay], coef[stay])
    mv = np.flatnonzero(opts.moves)
    j = opts.job_index[mv]
    # The move's steady gain per slot: its weight without the one-way loss, over staying.
    gain = coef[mv] + one_way[mv] - stay_best[j]
    trips = np.where(finishes[mv], 1.0, 2.0)
    pays = gain * dwell_slots[mv] > one_way[mv] * trips
    # An inference service that cannot stay keeps its moves: it must be placed.
    cannot_stay = ~np.isfinite(stay_best[j])
    pays |= cannot_stay
    # Within its minimum dwell no job moves again, a service included (its moves cost
    # little, so price dips of a slot or two made it ping-pong between two sites), unless
    # it cannot stay where it is.
    pays &= ~recently_moved[j] | cannot_stay
    if held is not None:
        pays &= training[j] | held[mv] | cannot_stay
    keep[mv] = pays
    assert stay_best.shape == (n_jobs,)
    return keep, stay_best


def event_exits(sc: Horizon, state: Any, opts: SlotOptions, events: Sequence[GridEvent]
                ) -> NDArray[np.bool_]:
    """The options that move an inference service away from a site in one of its grid
    events' slots, the event announced by then (:meth:`GridEvent.known_from`): such a move
    stays in the slot decision whatever it saves, since the event's limit may need the
    service's power elsewhere (held, the service alone may break it)."""
    t = state.t
    held_at = {ev.datacenter for ev in events
               if ev.known_from(sc) <= t and ev.slots(sc)[0] <= t < ev.slots(sc)[1]}
    if not held_at or not len(opts):
        return np.zeros(len(opts), dtype=bool)
    service = np.array([not state.jobs[int(j)].job.is_training
                        and state.jobs[int(j)].last_datacenter in held_at
                        for j in opts.job_index], dtype=bool)
    return service & np.asarray(opts.moves, dtype=bool)


def round_trip_keep(
    sc: Any, state: Any, opts: SlotOptions, coef: NDArray[np.float64],
    mu_opt: NDArray[np.float64], price: Mapping[str, float], *, restart_s: float,
    window_h: float, left: NDArray[np.float64], recent: NDArray[np.bool_],
    ahead_price: NDArray[np.float64] | None = None, min_dwell_slots: int = 1,
) -> NDArray[np.bool_]:
    """The look-ahead's options that stay in its slot decision: every option but a move
    that does not pay for its round trip (:func:`moves_that_pay`).

    A move's steady progress per slot is its progress without the transfer time, its one-way
    cost :func:`one_way_move_cost` at the destination's price; it dwells until the job
    finishes, its deadline (``left`` slots per job) or the end of the look-ahead window,
    whichever is first (the window plan moved it knowing the forecast and capacity);
    ``recent`` marks the jobs moved within the minimum dwell. ``ahead_price`` (forecast
    slots from now x datacenters, the scenario's order) lets a service move only where it
    is cheaper over ``min_dwell_slots`` (:func:`held_gain`)."""
    if not len(opts) or not opts.moves.any():
        return np.ones(len(opts), dtype=bool)
    region = {dc.name: dc.region for dc in sc.datacenters}
    p_opt = np.array([price[region[str(d)]] for d in opts.datacenter])
    useful = np.maximum(sc.slot_s - opts.transfer_s - restart_s, 1.0)
    steady = np.where(opts.moves, opts.progress * (sc.slot_s - restart_s) / useful,
                      opts.progress)
    one_way = one_way_move_cost(opts, mu_opt, steady, transfer_kwh(sc, opts) * p_opt,
                                float(sc.slot_s))
    rem = np.array([js.remaining for js in state.jobs], dtype=float)
    to_finish = rem[opts.job_index] / np.maximum(steady, 1e-12)
    cap = float(max(round(window_h * 3600 / sc.slot_s), 1))
    dwell = np.minimum(np.minimum(to_finish, left[opts.job_index]), cap)
    finishes = to_finish <= np.minimum(left[opts.job_index], cap)
    held = None
    if ahead_price is not None:
        names = [dc.name for dc in sc.datacenters]
        origin = np.array([names.index(js.last_datacenter) if js.last_datacenter in names
                           else 0 for js in state.jobs], dtype=np.int64)[opts.job_index]
        dest = np.array([names.index(str(d)) for d in opts.datacenter], dtype=np.int64)
        held = held_gain(ahead_price, origin, dest, min_dwell_slots) > 0
    keep, _ = moves_that_pay(opts, coef, one_way, dwell, finishes, recent, held)
    return keep
