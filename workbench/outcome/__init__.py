"""One model of a slot's outcome: what a job gets done, draws and loses in one slot.

Every part of the workbench that needs a job's progress, power or energy in a slot calls
this module: the simulator with the *truth* (the hidden throughput factor and noise, the
profile's gradient-noise trajectory), :func:`workbench.policies.base.slot_options` with the
*online estimate* (``speed`` = the estimated throughput scale, ``phi`` = the estimated
gradient noise scale), and the hindsight model with the profile's trajectory and no
losses. Where truth and prediction differ they differ in these parameters, never in code.

Charges of a placement (:func:`move_charges`), for a job placed on ``n`` GPUs of type ``g``
in datacenter ``d``::

    dataset   = dataset_gb   if d does not hold the job's dataset yet (first run away
                              from home; it travels from home, or the nearest copy)
    checkpoint= checkpoint_gb if the latest checkpoint lives in another datacenter
    transfer_s= sum over what travels of 8 * GB / bandwidth_gbps of its link
    restart   = 0          same datacenter, GPU type and count as the previous slot
              = resize_s   same datacenter and GPU type, another GPU count
              = restart_s  anything else (first start, resume after a pause, a move,
                           a change of GPU type)
    lost_s    = pending_s (an unfinished transfer or restart into d) + transfer_s + restart

Outcome of a slot of ``D`` seconds (:func:`slot_outcome`)::

    lost     = min(lost_s, D)                 the rest (lost_s - lost) is owed next slot:
                                              a long transfer spans several slots with the
                                              GPUs held, energy drawn and no progress
    X        = X_model(n, m) * speed          samples/s
    rate     = X * E_phi(m) / W_j             fraction of the work per second
    progress = min(rate * (D - lost), remaining)
    used_s   = D, or lost + remaining / rate  when the job finishes inside the slot
    P_it     = min(n * a1 + a2 * X, n * max_power_w)          W (held during lost time too)
    energy   = P_it * used_s / 3.6e6 * PUE + transfer_kwh / 2   kWh in d
    transfer_kwh = sum over what travels of GB * transfer_energy_kwh_per_gb of its link;
                   half is drawn at the destination (in ``energy``), half at the sending
                   datacenter (``source_kwh``), each at its own price and carbon
    movement_kwh = P_it * lost / 3.6e6 * PUE + transfer_kwh   the overhead of moving and
                   restarting (what a savings attribution calls *movement*)

An inference service draws ``P_it = n * (P_idle + load * (P_max - P_idle))`` while it is up
(``used_s`` = the part of the slot before its end); it loses no time to a move (the old
copy serves until the new one is up) but its data travel and are charged as above.

``restart_s`` defaults to :data:`RESTART_S_DEFAULT`; ``resize_s`` to
:data:`RESIZE_S_DEFAULT`, both illustrative (see their notes).

A datacenter-slot's energy balance (its load from renewables, battery and grid, the slot's
energy bill and carbon) is :func:`site_balance` (:mod:`workbench.outcome.supply`).

A training job run alone and uninterrupted on one configuration (:func:`uninterrupted_run`,
what :mod:`workbench.quote` prices) is these slots in sequence, as the simulator charges it.
"""

from workbench.outcome.run import UninterruptedRun, uninterrupted_run
from workbench.outcome.slot import (
    NO_CHARGES,
    RESIZE_S_DEFAULT,
    RESTART_S_DEFAULT,
    Charges,
    SlotOutcome,
    batch_grid,
    best_batch,
    best_batches,
    check_seconds,
    clear_memos,
    full_slot_rates,
    grid_throughput,
    move_charges,
    restart_seconds,
    service_power_w,
    slot_outcome,
    training_power_w,
    transfer_charges,
)
from workbench.outcome.supply import SiteSlot, site_balance
from workbench.outcome.vector import SlotOutcomes, best_batches_grouped, training_slot_outcomes

__all__ = [
    "NO_CHARGES", "RESIZE_S_DEFAULT", "RESTART_S_DEFAULT", "Charges", "SiteSlot", "SlotOutcome",
    "SlotOutcomes", "UninterruptedRun", "batch_grid", "best_batch", "best_batches",
    "best_batches_grouped", "check_seconds",
    "clear_memos", "full_slot_rates", "grid_throughput", "move_charges", "restart_seconds",
    "service_power_w", "site_balance", "slot_outcome", "training_power_w",
    "training_slot_outcomes", "transfer_charges", "uninterrupted_run",
]
