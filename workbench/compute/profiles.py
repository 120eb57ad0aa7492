"""Predicted job profiles: the planner's view of a GPU type no job was measured on.

The predictor gives step times on a grid of configurations; the Pollux throughput model
is fitted to them with the same fit as to measurements (:func:`workbench.fit.
fit_throughput_params`), so the planner reads one kind of profile. The profile is
``derived`` and carries ``step_time_interval``, the predictor's 5-95 % error range on
held-out devices (the wider of its 1-GPU and multi-GPU ranges). Batch limits follow the
device's memory (:func:`workbench.gpus.derive_efficiency`) and power the Zeus shape scaled
to its TDP (:func:`workbench.gpus.with_energy_from`).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from workbench.compute.devices import DeviceSpec, device
from workbench.compute.graph import Graph, load_graph
from workbench.compute.predict import Coefficients, load_coefficients, predict_step
from workbench.perf import EfficiencyParams, EnergyParams, JobProfile, ThroughputParams

if TYPE_CHECKING:
    from workbench.fit import EnergyFit

log = logging.getLogger(__name__)




def predicted_timings(graph: Graph, dev: DeviceSpec, coef: Coefficients, max_local_batch: int,
                      gpus_per_node: int) -> pd.DataFrame:
    """Predicted step-time rows in the layout of :func:`workbench.fit.read_pollux_timings`
    on 1, 2, 4, ... GPUs of one node and on 2 and 4 full nodes, at local batches from 1 to
    ``max_local_batch`` (geometric grid). ``sync_time = step - compute`` (the part of the
    step the compute does not cover, as Pollux measures it)."""
    counts = sorted({n for n in (1, 2, 4, 8, 16) if n <= gpus_per_node} | {gpus_per_node})
    placements = [(n, 1) for n in counts] + [(2 * gpus_per_node, 2), (4 * gpus_per_node, 4)]
    batches = sorted({int(round(b)) for b in np.geomspace(1, max(max_local_batch, 2), 8)})
    rows = []
    for n, k in placements:
        for b in batches:
            p = predict_step(graph, dev, n, b, coef, nodes=k)
            rows.append({"source": "predicted", "num_nodes": k, "num_replicas": n,
                         "local_bsz": b, "step_time": p.step_time_s,
                         "sync_time": max(p.step_time_s - p.compute_s, 0.0)})
    return pd.DataFrame(rows)


def predict_throughput(app: str, gpu_type: str, max_local_batch: int,
                       coef: Coefficients | None = None, graph: Graph | None = None
                       ) -> tuple[ThroughputParams, pd.DataFrame]:
    """Pollux parameters fitted to the predictor's timings of ``app`` on ``gpu_type``."""
    from workbench.fit import fit_throughput_params

    c = coef if coef is not None else load_coefficients()
    g = graph if graph is not None else load_graph(app)
    dev = device(gpu_type)
    rows = predicted_timings(g, dev, c, max_local_batch, dev.gpus_per_node)
    return fit_throughput_params(rows), rows


def profile_interval(coef: Coefficients) -> tuple[float, float]:
    """``(lo, hi)`` step-time factors: the union of the 1-GPU and multi-GPU ranges."""
    lo = min(coef.interval_1gpu[0], coef.interval_multi[0], 0.0)
    hi = max(coef.interval_1gpu[1], coef.interval_multi[1], 0.0)
    return math.exp(lo), math.exp(hi)


def predict_profile(app: str, efficiency: EfficiencyParams, energy_fit: EnergyFit | None,
                    target: str, coef: Coefficients | None = None) -> JobProfile:
    """A predicted :class:`JobProfile` of ``app`` on ``target``.

    ``efficiency`` is the app's (device-independent) efficiency fit; its per-GPU batch cap
    is rescaled to the target's memory first, and the throughput grid spans it.
    """
    from workbench.gpus import derive_efficiency, with_energy_from

    c = coef if coef is not None else load_coefficients()
    ep = derive_efficiency(efficiency, target)
    tp, rows = predict_throughput(app, target, ep.max_local_batch, c)
    from workbench.fit import placement_iteration_time

    pred = placement_iteration_time(tp, rows["num_nodes"], rows["num_replicas"],
                                    rows["local_bsz"])
    fit_err = float(np.median(np.abs(pred - rows["step_time"]) / rows["step_time"]))
    lo, hi = profile_interval(c)
    dev = device(target)
    src = (f"throughput: predicted from the {app} graph on {dev.name} "
           f"({dev.fp32_tflops:g} TF FP32, {dev.mem_bw_gb_s:g} GB/s; Pollux form fitted to "
           f"the predictions, median APE {100 * fit_err:.1f}%), 90% interval x{lo:.2f}..x{hi:.2f}")
    placeholder = EnergyParams(a1_w=0.0, a2_w_per_sps=0.0, max_power_w=dev.tdp_w)
    prof = JobProfile(app=app, gpu_type=target, throughput=tp, efficiency=ep,
                      energy=placeholder, derived=True, source=f"{src}; energy: -",
                      step_time_interval=(lo, hi))
    return with_energy_from(prof, energy_fit)


MIN_MEASUREMENTS_TO_FIT = 3
"""Stored measurements of an (app, device) needed before a fit replaces the prediction."""


def profile_from_measurements(store: object, base: JobProfile) -> JobProfile | None:
    """``base`` with its throughput fitted to the store's measurements of ``base.app`` on
    ``base.gpu_type`` (:func:`workbench.fit.fit_throughput_params`), no longer derived and
    without an interval; None with fewer than :data:`MIN_MEASUREMENTS_TO_FIT` rows."""
    from dataclasses import replace

    from workbench.compute.measure import load_measurements, measurement_timings
    from workbench.fit import fit_throughput_params, mape, placement_iteration_time

    rows = load_measurements(store, base.app, base.gpu_type)
    if len(rows) < MIN_MEASUREMENTS_TO_FIT:
        return None
    t = measurement_timings(rows)
    tp = fit_throughput_params(t)
    err = mape(placement_iteration_time(tp, t["num_nodes"], t["num_replicas"],
                                        t["local_bsz"]), t["step_time"])
    energy_src = base.source.split("; energy:", 1)[1] if "; energy:" in base.source else " -"
    prof = replace(base, throughput=tp, derived=False, step_time_interval=None,
                   source=f"throughput: fitted to {len(t)} stored measurements on "
                          f"{base.gpu_type} (step-time MAPE {100 * err:.1f}%); energy:"
                          f"{energy_src}")
    return prof  # the power model of ``base`` is kept
