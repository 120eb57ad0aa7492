"""The slot loop: hand each slot's state to a policy, apply its allocation to the truth, record.

The clock is explicit: slot ``t`` covers ``[start + t*slot_s, start + (t+1)*slot_s)``. Each
slot the simulator

1. activates arrivals (a training job from the first slot starting at or after its arrival,
   until it finishes; an inference service in every slot starting in ``[arrival, end)``);
2. builds a :class:`~workbench.policies.base.SlotState` with the jobs' remaining work and
   online estimates, and a :class:`~workbench.forecast.Forecast` from
   :func:`workbench.forecast.forecast`;
3. calls ``policy.decide`` and validates the allocation (pool capacity, allowed GPU types,
   latency bounds, links for moves); an invalid allocation raises :class:`AllocationError`.
   GPU counts outside a job's ``gpu_counts`` are accepted (operators may pass wider menus
   to a policy) as long as the pool holds them;
4. applies it to the *truth* through the one slot model (:mod:`workbench.outcome`):
   progress at the profile's true gradient noise scale, times a hidden per-job throughput
   factor and per-slot noise; the dataset's first trip away from home, checkpoint moves,
   restarts on a start, resume, move or change of GPU type or count (transfers longer than
   a slot span slots); energy at each end; the site meter (:mod:`workbench.meter`) reads
   each datacenter's load, own supply, battery and grid import (``site:<field>:<dc>``, the
   caps are on its import) and gives each plan row its share of the bill's controllable
   part;
5. re-estimates each job's throughput scale and gradient noise scale from the noisy
   observations (:class:`workbench.estimate.OnlineEstimator`, exponential moving averages);
6. hands a :class:`SlotRecord` to every recorder.

The simulator never asks which policy it runs: every policy is driven by the same
``reset``/``decide`` calls and the same truth, and sees only a
:class:`~workbench.model.ScenarioView` (no true prices, no future arrivals).

Truth model, for a training job on ``n`` GPUs of type ``g`` with global batch ``m``
(:func:`workbench.outcome.slot_outcome` with ``speed = f_j * eta_t`` and ``phi`` the
profile's trajectory at the job's true progress; the policies predict with the same
function at their online estimates)::

    f_j ~ LogNormal(0, noise) once per job,  eta_t ~ LogNormal(0, noise) per job and slot
    lost, progress, used_s, energy: see workbench.outcome

An inference service draws ``n * (idle + load * (max - idle))`` W for the whole slot, or
until its end when it ends inside the slot.
"""

from workbench.sim.loop import EMA_ALPHA_DEFAULT, simulate
from workbench.sim.results import Recorder, RunResult, SlotRecord
from workbench.sim.truth import AllocationError

__all__ = ["EMA_ALPHA_DEFAULT", "AllocationError", "Recorder", "RunResult", "SlotRecord",
           "simulate"]
