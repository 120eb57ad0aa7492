"""The profile of a job on a GPU type: one home for derived, predicted, fitted and measured.

A :class:`~workbench.perf.JobProfile` of an application on a GPU type comes from one of:

* **fitted**: the Pollux fit on the GPU the application was measured on
  (:data:`workbench.gpus.REFERENCE_GPU`, :func:`derive_profile` with no factor);
* **predicted**: the step-time predictor of :mod:`workbench.compute` on the device's
  datasheet, summarised by the Pollux form (:func:`predict_profile`; ``derived`` and
  labelled with ``step_time_interval``, the predictor's 5-95 % held-out error range);
* **derived**: the hand-set factor table of :mod:`workbench.gpus` (:func:`derive_profile`,
  kept for comparison);
* **measured**: a fit to the store's step-time measurements on that device
  (:func:`profile_from_measurements`; no longer derived, no interval).

Batch limits follow the device's memory (:func:`derive_efficiency`) and power the Zeus shape
scaled to its TDP (:func:`derive_energy`, :func:`with_energy_from`). The shipped
``data/profiles.json`` is written by :func:`write_default_profiles`; ``workbench import
profiles`` goes through :func:`import_profiles`.

Imports flow one way: ``perf`` <- ``fit`` <- ``gpus`` <- ``compute`` <- this module.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.compute.apps import (
    AppChoice,
    KernelPath,
    chosen_predictor,
    predict_app_step,
    read_app_predictors,
)
from workbench.compute.devices import DeviceSpec, device
from workbench.compute.graph import Graph, load_graph
from workbench.compute.predict import Coefficients, load_coefficients
from workbench.fit import (
    POLLUX_APPS,
    ZEUS_NETWORK_FOR_APP,
    EnergyFit,
    ProfileDataError,
    ThroughputFit,
    fit_pollux_app,
    fit_throughput_params,
    fit_zeus_gpu,
    mape,
    placement_iteration_time,
)
from workbench.gpus import REFERENCE_GPU, derive_throughput, gpu_spec
from workbench.perf import (
    EfficiencyParams,
    EnergyParams,
    JobProfile,
    ThroughputParams,
    profiles_to_json,
    throughput,
)

log = logging.getLogger(__name__)

ENERGY_REFERENCE_TDP_W = 250.0
"""Largest power limit in the Zeus V100 trace (a V100 PCIe), W."""


# --------------------------------------------------------------------------- derived


def derive_efficiency(e: EfficiencyParams, target: str,
                      reference: str = REFERENCE_GPU) -> EfficiencyParams:
    """Efficiency parameters on ``target``: the per-GPU batch cap grows with memory.

    ``max_local_batch' = min(max_batch, floor(max_local_batch * mem_t / mem_r))``; the
    gradient noise scale is a property of the model and data, not of the device.
    """
    ratio = device(target).memory_gb / device(reference).memory_gb
    cap = int(min(e.max_batch, max(1, np.floor(e.max_local_batch * ratio))))
    return EfficiencyParams(
        m0=e.m0, min_batch=e.min_batch, max_batch=e.max_batch,
        max_local_batch=max(cap, 1), phi_progress=e.phi_progress, phi_values=e.phi_values,
    )


def derive_energy(
    idle_fraction: float, full_fraction: float, x_full_sps: float, target: str
) -> EnergyParams:
    """Power model on ``target`` from a measured shape.

    With ``f_0 = a1 / P_ref`` and ``f_1 = (a1 + a2 X_ref,max) / P_ref`` measured on the
    reference GPU (board limit ``P_ref``) and ``X_full`` the job's one-GPU throughput at its
    largest local batch on ``target`` (TDP ``P_t``)::

        a1' = f_0 * P_t
        a2' = (f_1 - f_0) * P_t / X_full
        max_power_w = P_t
    """
    tdp = device(target).tdp_w
    f0 = float(np.clip(idle_fraction, 0.0, 1.0))
    f1 = float(np.clip(full_fraction, f0, 1.0))
    return EnergyParams(a1_w=f0 * tdp, a2_w_per_sps=(f1 - f0) * tdp / x_full_sps,
                        max_power_w=tdp)


# Fallback power shape when no energy fit matches an application: about 30% of the board
# limit when allocated and 85% at full load, typical of the Zeus V100 vision workloads.
_DEFAULT_IDLE_FRACTION = 0.3
_DEFAULT_FULL_FRACTION = 0.85


def _energy(
    tp: ThroughputParams, ep: EfficiencyParams, energy_fit: EnergyFit | None, target: str
) -> tuple[EnergyParams, str]:
    x_full = float(throughput(tp, 1, ep.max_local_batch))
    if energy_fit is not None:
        p_ref = energy_fit.params.max_power_w or ENERGY_REFERENCE_TDP_W
        f0 = energy_fit.params.a1_w / p_ref
        f1 = energy_fit.full_load_power_w / p_ref
        src = (f"Zeus {energy_fit.gpu} {energy_fit.dataset}/{energy_fit.network} "
               f"(power MAPE {100 * energy_fit.mape:.1f}%): idle {f0:.2f}, full {f1:.2f} "
               f"of {p_ref:.0f} W")
    else:
        f0, f1 = _DEFAULT_IDLE_FRACTION, _DEFAULT_FULL_FRACTION
        src = f"default shape: idle {f0:.2f}, full {f1:.2f} of TDP"
    tdp = device(target).tdp_w
    return derive_energy(f0, f1, x_full, target), f"{src} scaled to {tdp:.0f} W"


def derive_profile(
    app: str,
    params: ThroughputParams,
    efficiency: EfficiencyParams,
    energy_fit: EnergyFit | None,
    target: str,
    throughput_mape: float | None = None,
) -> JobProfile:
    """A :class:`JobProfile` of ``app`` on ``target`` from fits on the reference GPUs.

    ``params`` and ``efficiency`` were fitted on :data:`REFERENCE_GPU`; ``energy_fit`` is
    the Zeus power shape of the closest network (None: a default shape). ``derived`` is
    False only for the T4 itself; ``source`` records every factor used.
    """
    spec = gpu_spec(target)
    tp = derive_throughput(params, target)
    ep = derive_efficiency(efficiency, target)
    energy, e_src = _energy(tp, ep, energy_fit, target)
    ref = gpu_spec(REFERENCE_GPU)
    t_src = f"Pollux {app} on {REFERENCE_GPU}"
    if throughput_mape is not None:
        t_src += f" (step-time MAPE {100 * throughput_mape:.1f}%)"
    if target != REFERENCE_GPU:
        t_src += (f", compute x{spec.compute_speed / ref.compute_speed:g}, "
                  f"sync intra x{spec.intra_sync_speed / ref.intra_sync_speed:g} "
                  f"inter x{spec.inter_sync_speed / ref.inter_sync_speed:g}, "
                  f"memory x{spec.memory_gb / ref.memory_gb:g}")
    return JobProfile(app=app, gpu_type=target, throughput=tp, efficiency=ep, energy=energy,
                      derived=target != REFERENCE_GPU,
                      source=f"throughput: {t_src}; energy: {e_src}")


def with_energy_from(profile: JobProfile, energy_fit: EnergyFit | None) -> JobProfile:
    """``profile`` with its power model re-derived from ``energy_fit`` (see
    :func:`derive_energy`); the source string's energy part is replaced."""
    energy, e_src = _energy(profile.throughput, profile.efficiency, energy_fit,
                            profile.gpu_type)
    head = profile.source.split("; energy:")[0]
    return replace(profile, energy=energy, source=f"{head}; energy: {e_src}")


# --------------------------------------------------------------------------- predicted


def predicted_timings(graph: Graph, dev: DeviceSpec, coef: Coefficients, max_local_batch: int,
                      gpus_per_node: int, choices: dict[str, AppChoice] | None = None
                      ) -> pd.DataFrame:
    """Predicted step-time rows in the layout of :func:`workbench.fit.read_pollux_timings`
    on 1, 2, 4, ... GPUs of one node and on 2 and 4 full nodes, at local batches from 1 to
    ``max_local_batch`` (geometric grid), by the app's predictor
    (:func:`workbench.compute.apps.predict_app_step`). ``sync_time = step - compute`` (the
    part of the step the compute does not cover, as Pollux measures it)."""
    ch = choices if choices is not None else read_app_predictors()
    kp = KernelPath.shipped() if chosen_predictor(graph, ch) == "kernel" else None
    counts = sorted({n for n in (1, 2, 4, 8, 16) if n <= gpus_per_node} | {gpus_per_node})
    placements = [(n, 1) for n in counts] + [(2 * gpus_per_node, 2), (4 * gpus_per_node, 4)]
    batches = sorted({int(round(b)) for b in np.geomspace(1, max(max_local_batch, 2), 8)})
    rows = []
    for n, k in placements:
        for b in batches:
            p = predict_app_step(graph, dev, n, b, coef, nodes=k, kernel_path=kp, choices=ch)
            rows.append({"source": "predicted", "num_nodes": k, "num_replicas": n,
                         "local_bsz": b, "step_time": p.step_time_s,
                         "sync_time": max(p.step_time_s - p.compute_s, 0.0)})
    return pd.DataFrame(rows)


def predict_throughput(app: str, gpu_type: str, max_local_batch: int,
                       coef: Coefficients | None = None, graph: Graph | None = None,
                       choices: dict[str, AppChoice] | None = None
                       ) -> tuple[ThroughputParams, pd.DataFrame]:
    """Pollux parameters fitted to the predictor's timings of ``app`` on ``gpu_type``
    (``choices``: the per-app predictor table, the shipped one by default)."""
    c = coef if coef is not None else load_coefficients()
    g = graph if graph is not None else load_graph(app)
    dev = device(gpu_type)
    rows = predicted_timings(g, dev, c, max_local_batch, dev.gpus_per_node, choices)
    return fit_throughput_params(rows), rows


def profile_interval(coef: Coefficients, choice: AppChoice | None = None
                     ) -> tuple[float, float]:
    """``(lo, hi)`` step-time factors: the union of the 1-GPU and multi-GPU ranges of the
    app's predictor (the kernel model's from ``choice`` where it serves the app)."""
    i1, im = coef.interval_1gpu, coef.interval_multi
    if choice is not None and choice.predictor == "kernel":
        i1, im = choice.interval_1gpu or i1, choice.interval_multi or im
    lo = min(i1[0], im[0], 0.0)
    hi = max(i1[1], im[1], 0.0)
    return math.exp(lo), math.exp(hi)


def predict_profile(app: str, efficiency: EfficiencyParams, energy_fit: EnergyFit | None,
                    target: str, coef: Coefficients | None = None,
                    reference: str = REFERENCE_GPU,
                    choices: dict[str, AppChoice] | None = None) -> JobProfile:
    """A predicted :class:`JobProfile` of ``app`` on ``target``, by the app's predictor
    (``choices``, the shipped table by default; :mod:`workbench.compute.apps`).

    ``efficiency`` is the app's efficiency fit on ``reference``; its per-GPU batch cap is
    rescaled to the target's memory first, and the throughput grid spans it.
    """
    c = coef if coef is not None else load_coefficients()
    ch = choices if choices is not None else read_app_predictors()
    ep = derive_efficiency(efficiency, target, reference)
    tp, rows = predict_throughput(app, target, ep.max_local_batch, c, choices=ch)
    pred = placement_iteration_time(tp, rows["num_nodes"], rows["num_replicas"],
                                    rows["local_bsz"])
    fit_err = float(np.median(np.abs(pred - rows["step_time"]) / rows["step_time"]))
    choice = ch.get(app)
    which = chosen_predictor(load_graph(app), ch)
    lo, hi = profile_interval(c, choice if which == "kernel" else None)
    dev = device(target)
    src = (f"throughput: predicted from the {app} graph"
           f"{' by the kernel-level model' if which == 'kernel' else ''} on {dev.name} "
           f"({dev.fp32_tflops:g} TF FP32, {dev.mem_bw_gb_s:g} GB/s; Pollux form fitted to "
           f"the predictions, median APE {100 * fit_err:.1f}%), 90% interval x{lo:.2f}..x{hi:.2f}")
    placeholder = EnergyParams(a1_w=0.0, a2_w_per_sps=0.0, max_power_w=dev.tdp_w)
    prof = JobProfile(app=app, gpu_type=target, throughput=tp, efficiency=ep,
                      energy=placeholder, derived=True, source=f"{src}; energy: -",
                      step_time_interval=(lo, hi))
    return with_energy_from(prof, energy_fit)


def predicted_profiles(profiles: Sequence[JobProfile], gpu_types: Sequence[str],
                       apps: Sequence[str] | None = None) -> list[JobProfile]:
    """A *predicted* profile of each app of ``profiles`` (or of ``apps``) on each GPU type of
    ``gpu_types`` that ``profiles`` lack and the device table knows (``workbench devices
    list``): the H100 of a pool needs no fit first.

    Each comes from :func:`predict_profile` on the app's computation graph, its efficiency
    from the app's profile on another device (the batch cap rescaled by memory) and its
    power the same shape, idle and full-load fractions of the board limit, scaled to the
    target's TDP (:func:`derive_energy`). Labelled predicted (``step_time_interval``); an
    app without a shipped graph, or a device the table does not know, gets none.
    """
    from workbench.compute.graph import app_graph_names

    have = {(p.app, p.gpu_type) for p in profiles}
    wanted = sorted(set(apps) if apps is not None else {p.app for p in profiles})
    out = []
    for app in wanted:
        mine = [p for p in profiles if p.app == app]
        if not mine or app not in app_graph_names():
            continue
        base = min(mine, key=lambda p: (p.derived, p.gpu_type))  # a fitted one first
        for gpu in sorted(set(gpu_types)):
            if (app, gpu) in have:
                continue
            try:
                device(gpu)
            except KeyError:
                continue
            prof = predict_profile(app, base.efficiency, None, gpu, reference=base.gpu_type)
            e = base.energy
            x_base = float(throughput(base.throughput, 1, base.efficiency.max_local_batch))
            f0 = e.a1_w / e.max_power_w
            f1 = (e.a1_w + e.a2_w_per_sps * x_base) / e.max_power_w
            x_full = float(throughput(prof.throughput, 1, prof.efficiency.max_local_batch))
            head = prof.source.split("; energy:")[0]
            out.append(replace(prof, energy=derive_energy(f0, f1, x_full, gpu), source=(
                f"{head}; energy: the {app} power shape on {base.gpu_type} (idle {f0:.2f}, "
                f"full {f1:.2f} of its limit) scaled to {device(gpu).tdp_w:.0f} W")))
            log.info("predicted the %s profile on %s (none was shipped or stored)",
                     app, gpu)
    return out


MIN_MEASUREMENTS_TO_FIT = 3
"""Stored measurements of an (app, device) needed before a fit replaces the prediction."""


def profile_from_measurements(store: object, base: JobProfile) -> JobProfile | None:
    """``base`` with its throughput fitted to the store's measurements of ``base.app`` on
    ``base.gpu_type`` (:func:`workbench.fit.fit_throughput_params`), no longer derived and
    without an interval; None with fewer than :data:`MIN_MEASUREMENTS_TO_FIT` rows."""
    from workbench.compute.measure import load_measurements, measurement_timings

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


# --------------------------------------------------------------------------- defaults


def _pollux_dir(profiles_dir: Path) -> Path:
    return profiles_dir / "pollux" if (profiles_dir / "pollux").is_dir() else profiles_dir


def _zeus_dir(profiles_dir: Path) -> Path:
    return profiles_dir / "zeus" if (profiles_dir / "zeus").is_dir() else profiles_dir


def build_default_profiles(
    profiles_dir: Path | str,
    gpu_types: Sequence[str] = ("H800", "A100", "Ascend910B"),
    apps: Sequence[str] = POLLUX_APPS,
    energy_reference_gpu: str = "v100",
) -> tuple[list[JobProfile], dict[str, Any]]:
    """Fit every Pollux app and derive its profile on each of ``gpu_types``.

    Returns the profiles and a report ``{"throughput_mape": {app: x},
    "energy_mape": {"<dataset>/<network>": x}}``. GPU types other than the measured
    reference get *predicted* profiles (:func:`profile_for_gpu`).
    """
    root = Path(profiles_dir)
    energy = {(f.dataset, f.network): f for f in fit_zeus_gpu(_zeus_dir(root),
                                                                  energy_reference_gpu)}
    out: list[JobProfile] = []
    report: dict[str, Any] = {"throughput_mape": {}, "energy_mape": {}}
    for key, f in energy.items():
        report["energy_mape"]["/".join(key)] = round(f.mape, 4)
    for app in apps:
        fit = fit_pollux_app(_pollux_dir(root) / app)
        report["throughput_mape"][app] = round(fit.mape, 4)
        efit = energy[ZEUS_NETWORK_FOR_APP[app]]
        for gpu in gpu_types:
            out.append(profile_for_gpu(fit, efit, gpu))
    return out, report


def profile_for_gpu(fit: ThroughputFit, energy_fit: EnergyFit | None, gpu: str) -> JobProfile:
    """The profile of a fitted app on ``gpu``: the fit itself on the GPU it was measured on
    (:data:`workbench.gpus.REFERENCE_GPU`), else predicted from the app's computation graph
    (:func:`predict_profile`, labelled with its interval)."""
    if gpu == REFERENCE_GPU:
        return derive_profile(fit.app, fit.params, fit.efficiency, energy_fit, gpu,
                              throughput_mape=fit.mape)
    return predict_profile(fit.app, fit.efficiency, energy_fit, gpu)


def write_default_profiles(
    profiles_dir: Path | str, out_path: Path | str, **kwargs: Any
) -> dict[str, Any]:
    """Regenerate the shipped ``data/profiles.json`` from the measured profiles."""
    profiles, report = build_default_profiles(profiles_dir, **kwargs)
    from workbench.io.plan_csv import atomic_write

    doc = profiles_to_json(profiles)
    doc["fit_report"] = report

    # Atomic: an interrupted regeneration leaves the shipped profiles as they were.
    with atomic_write(out_path) as fh:
        fh.write(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    log.info("wrote %d profiles to %s", len(profiles), out_path)
    return report


def _energy_fits(zeus_dir: Path, gpu: str = "v100") -> dict[tuple[str, str], EnergyFit]:
    if not (zeus_dir / f"summary_power_{gpu}.csv").is_file():
        log.warning("no summary_power_%s.csv in %s: default power shape used", gpu, zeus_dir)
        return {}
    return {(f.dataset, f.network): f for f in fit_zeus_gpu(zeus_dir, gpu)}


def import_profiles(
    store: Any,
    kind: str,
    directory: Path | str,
    gpu_types: Sequence[str] = ("T4", "H800", "A100", "Ascend910B"),
) -> int:
    """Fit measured profiles in ``directory`` and save the resulting profiles in ``store``.

    Parameters
    ----------
    store : workbench.store.Store
        Open store; profiles go through ``store.save_profiles`` (insert or replace by
        application and GPU type).
    kind : {"pollux", "zeus"}
        ``pollux``: ``directory`` holds one folder per application (or a ``pollux/``
        folder); each is fitted and saved on every GPU type of ``gpu_types`` (``T4``
        measured, the others derived), with power shapes from a sibling ``zeus/`` folder
        when present. ``zeus``: ``directory`` holds ``summary_power_v100.csv``; the power
        parameters of every stored profile (or, when the store has none, of the shipped
        defaults) are re-derived from it.
    directory : path

    Returns
    -------
    int
        Number of profiles saved.
    """
    from workbench.perf import load_default_profiles

    d = Path(directory)
    if not d.is_dir():
        holds = "<app>/placements.csv folders" if kind == "pollux" else "summary_power_v100.csv"
        raise ProfileDataError(f"{d} is not a folder; pass the folder holding {holds}")
    if kind == "pollux":
        root = _pollux_dir(d)
        apps = sorted(p.name for p in root.iterdir() if (p / "placements.csv").is_file())
        if not apps:
            raise ProfileDataError(f"no <app>/placements.csv folders under {d}")
        zeus = root.parent / "zeus"
        energy = _energy_fits(zeus) if zeus.is_dir() else {}
        out = []
        for app in apps:
            fit = fit_pollux_app(root / app)
            efit = energy.get(ZEUS_NETWORK_FOR_APP.get(app, ("", "")))
            out += [profile_for_gpu(fit, efit, g) for g in gpu_types]
        store.save_profiles(out)
        return len(out)
    if kind == "zeus":
        zdir = _zeus_dir(d)
        energy = _energy_fits(zdir)
        if not energy:
            raise ProfileDataError(f"no summary_power_v100.csv in {zdir}")
        current = list(store.load_profiles()) or load_default_profiles()
        out = [with_energy_from(p, energy.get(ZEUS_NETWORK_FOR_APP.get(p.app, ("", ""))))
               for p in current]
        store.save_profiles(out)
        return len(out)
    raise ValueError(f"unknown profile kind {kind!r}; use 'pollux' or 'zeus'")


# --------------------------------------------------------------------------- LLM jobs

ACCUMULATION_STEPS: tuple[int, ...] = (2, 4, 8, 16, 32)
"""Micro-batches accumulated per optimizer step beyond the largest batch that fits."""

LLM_GPU_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
"""GPU counts an LLM profile is predicted on (one node up to 8, then 2 and 4 nodes), times
the tensor-parallel degree a model needs to fit."""


def _transformer_power_shape() -> tuple[float, float, str]:
    """Idle and full-load power as fractions of the board limit, from the shipped BERT
    profile (the Zeus V100 squad/bert_base shape: the closest transformer measured)."""
    from workbench.perf import load_default_profiles

    bert = next((p for p in load_default_profiles() if p.app == "bert"), None)
    if bert is None:  # pragma: no cover - the shipped profiles hold bert
        return 0.3, 0.85, "default shape"
    e = bert.energy
    x = float(throughput(bert.throughput, 1, bert.efficiency.max_local_batch))
    f1 = min((e.a1_w + e.a2_w_per_sps * x) / e.max_power_w, 1.0)
    return e.a1_w / e.max_power_w, f1, "the shipped bert profile's (Zeus V100 squad/bert)"


def predict_llm_rows(job: Any, target: str, predictor: Any | None = None
                     ) -> tuple[pd.DataFrame, int, int]:
    """Predicted step times of an LLM job on ``target`` in the layout of
    :func:`workbench.fit.read_pollux_timings`: data parallel over 1, 2, 4, 8 GPUs of one
    node and 2 and 4 nodes (each replica tensor-parallel over ``tp`` GPUs, the smallest
    degree dividing the heads that fits), at replica batches 1, 2, 4, ... up to what fits in
    memory (with the job's activation checkpointing), then ``k = 2 .. 32`` micro-batches of
    the largest accumulated before each optimizer step (``k (T_fw + T_bw) + T_opt``). The
    FP32 gradient's all-reduce (:mod:`workbench.compute.collectives`) overlaps the last
    micro-batch's backward pass but for DDP's last bucket. A ZeRO job (``job.zero``) shards
    over one node's replicas and is predicted on whole nodes only (stage 3 gathers the
    weights again in each forward pass). Returns the rows, the largest replica batch
    (accumulation included) and ``tp``."""
    from workbench.compute.collectives import all_gather_s, all_reduce_s, shipped_collectives
    from workbench.compute.llm import load_predictor
    from workbench.compute.step import (
        DDP_BUCKET_BYTES,
        DeviceMemoryError,
        StepOptions,
        predict_transformer,
    )
    from workbench.compute.transformer import check_seq_len, load_model_config

    dev = device(target)
    pred = predictor or load_predictor()
    spec = load_model_config(job.model_config)
    check_seq_len(spec, job.seq_len, "seq_len")
    zero = int(getattr(job, "zero", 0))
    tp = 1
    fits: list[tuple[int, Any]] = []
    for tp in (t for t in (1, 2, 4, 8) if spec.heads % t == 0):
        if tp > dev.gpus_per_node:
            break
        opts = StepOptions(activation_checkpointing=bool(getattr(
            job, "activation_checkpointing", False)), zero=zero,
            zero_over=dev.gpus_per_node // tp if zero else 0)
        fits = []
        for b in (2 ** i for i in range(12)):
            try:
                fits.append((b, predict_transformer(
                    spec, "train", job.seq_len, b, dev, pred.kernels, pred.terms, tp,
                    "tp" if tp > 1 else "dp", job.precision, options=opts)))
            except DeviceMemoryError:
                break
        if fits:
            break
    if not fits:
        raise ProfileDataError(f"{job.name}: {spec.name} does not fit on one node of "
                               f"{dev.name} even with 8-way tensor parallelism")
    rows = []
    per_node = dev.gpus_per_node // tp
    b_mem, top = fits[-1]
    plan = [(b, 1, one) for b, one in fits] + [(b_mem * k, k, top) for k in ACCUMULATION_STEPS]
    grad_bytes = top.params * 4.0 / tp  # FP32 gradients (autocast keeps FP32 weights)
    col = shipped_collectives()
    for b, k, one in plan:
        fw = one.forward_s
        micro = one.backward_s + one.recompute_s + one.exposed_comm_s  # with its TP comm
        for replicas in (1, 2, 4, 8, 16, 32):
            if zero and replicas < per_node:
                continue  # ZeRO shards over a node's replicas: whole nodes only
            nodes = max(1, -(-replicas // per_node))
            reduce = all_reduce_s(grad_bytes, replicas, dev, col, nodes, pred.terms.sync)
            last = all_reduce_s(min(grad_bytes, DDP_BUCKET_BYTES), replicas, dev, col, nodes,
                                pred.terms.sync)
            exposed = max(reduce - last - micro, 0.0) + last if replicas > 1 else 0.0
            if zero >= 3 and replicas > 1:  # the weights gathered again each forward pass
                gather = all_gather_s(grad_bytes, replicas, dev, col, nodes, pred.terms.sync)
                exposed += k * max(gather - fw, 0.0)
            alone = k * (fw + micro) + one.optimizer_s
            rows.append({"source": "predicted", "num_nodes": nodes,
                         "num_replicas": replicas * tp, "local_bsz": b / tp,
                         "step_time": alone + exposed, "sync_time": exposed})
    return pd.DataFrame(rows), b_mem * ACCUMULATION_STEPS[-1], tp


def predict_llm_profile(job: Any, target: str, predictor: Any | None = None) -> JobProfile:
    """:func:`predict_llm_profile_tp` without the tensor-parallel degree."""
    return predict_llm_profile_tp(job, target, predictor)[0]


def predict_llm_profile_tp(job: Any, target: str, predictor: Any | None = None
                           ) -> tuple[JobProfile, int]:
    """The planner's profile of an LLM job (:class:`workbench.compute.llm.LlmJobSpec`) on
    ``target``: the Pollux form fitted to :func:`predict_llm_rows` (throughput in sequences
    per second), efficiency from the critical batch size
    (:func:`workbench.compute.llm.noise_scale_trajectory`), power from the transformer power
    shape scaled to the target's TDP; ``derived`` and labelled with the predictor's interval
    (widened in BF16); and the GPU count the job's counts must be multiples of: the
    tensor-parallel degree a replica needs to fit, or a whole node under ZeRO."""
    from workbench.compute.llm import load_predictor, noise_scale_trajectory
    from workbench.compute.transformer import load_model_config

    pred = predictor or load_predictor()
    dev = device(target)
    rows, max_b, tp = predict_llm_rows(job, target, pred)
    unit = dev.gpus_per_node if int(getattr(job, "zero", 0)) else tp
    tp_params = fit_throughput_params(rows)
    fit_err = mape(placement_iteration_time(tp_params, rows["num_nodes"], rows["num_replicas"],
                                            rows["local_bsz"]), rows["step_time"])
    spec = load_model_config(job.model_config)
    from workbench.compute.opgraph import build_step_graph

    n_layer_params = build_step_graph(spec, "inference", 1, 1).params["layers"]
    prog, phi = noise_scale_trajectory(n_layer_params, job.seq_len, job.tokens,
                                       job.tokens_before)
    m0 = int(job.global_batch)  # LLMs train at the asked global batch: the only one offered
    eff = EfficiencyParams(m0=m0, min_batch=m0, max_batch=m0,
                           max_local_batch=max(1, max_b // tp), phi_progress=prog,
                           phi_values=phi)
    f0, f1, shape = _transformer_power_shape()
    x_full = float(throughput(tp_params, 1, eff.max_local_batch))
    energy = derive_energy(f0, f1, x_full, dev.name)
    lo, hi = pred.terms.interval("train", job.precision)
    tp_note = f", {tp}-way tensor parallel per replica" if tp > 1 else ""
    if unit != tp:
        tp_note += f", ZeRO stage {job.zero} over each node's replicas (whole nodes)"
    estimated = sorted(f for f, v in dev.sources.items() if str(v).startswith("estimate"))
    if estimated:
        tp_note += f"; device figures {', '.join(estimated)} are estimates"
    src = (f"throughput: predicted by the kernel-level model for {spec.name} "
           f"({job.precision}, {job.seq_len} tokens{tp_note}) on {dev.name} (Pollux form "
           f"fitted to {len(rows)} predicted steps, median APE {100 * fit_err:.1f}%), 90% "
           f"interval x{math.exp(lo):.2f}..x{math.exp(hi):.2f}; efficiency: critical batch "
           f"(Kaplan et al. 2020) phi {phi[0]:.0f}..{phi[-1]:.0f} sequences; energy: "
           f"{shape} shape {f0:.2f}..{f1:.2f} of {dev.tdp_w:.0f} W")
    return JobProfile(app=job.name, gpu_type=dev.name, throughput=tp_params, efficiency=eff,
                      energy=energy, derived=True, source=src,
                      step_time_interval=(math.exp(lo), math.exp(hi))), unit
