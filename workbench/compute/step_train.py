"""Fit the step-level terms on NeuSight's measured steps; leave one device out at model level.

Every measured step of ``../shared/data/profiles/neusight/step_times`` (BERT-large, GPT-2
large, GPT-3 XL and 2.7B, OPT-1.3B, Switch-XL; inference on the five GPUs, training on the
V100; the ``-fusion`` runs, whose kernels were fused by a compiler, are left out: our graphs
are eager PyTorch's) is rebuilt as an operator graph of the configuration NeuSight ran
(BERT with its pre-training heads in training and the classifier in inference, gradients
accumulated into ``.grad``, no optimizer step: ``e2e_latency`` is forward + backward), its
kernels predicted; the timer costs of :mod:`workbench.compute.step` come from the kernel
measurements and the host launch floor is fitted by robust least squares on
``log(predicted / measured)``.

Leave-one-device-out at model level: for each held-out device the kernel model fitted
without it (:attr:`workbench.compute.kernel_train.KernelTraining.without`) and launch terms
fitted on the other devices' steps predict its steps. The interval of
:class:`~workbench.compute.step.StepTerms` is the 5-95 % range of those held-out log errors.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from workbench.compute.devices import BUILTIN_DEVICES
from workbench.compute.kernel_train import (
    CANDIDATES,
    KernelTraining,
    half_precision_widening,
    kernel_frame,
    train_kernel_model,
)
from workbench.compute.kernels import ROOFLINE_KERNELS, KernelModel, write_kernel_model
from workbench.compute.neusight import HELD_OUT_GROUP, model_config, read_step_times
from workbench.compute.opgraph import StepGraph, build_step_graph
from workbench.compute.predict import SyncModel
from workbench.compute.step import (
    GPU_LAUNCH_S,
    KernelTimes,
    StepTerms,
    kernel_times,
    write_step_terms,
)
from workbench.compute.transformer import model_spec

log = logging.getLogger(__name__)

LOSS_SCALE = 0.1
"""``f_scale`` of the ``soft_l1`` loss (log units): a step off by more than ~10 % pulls the
two launch terms linearly, not quadratically."""


def neusight_graph(folder: Path | str, model: str, mode: str, seq_len: int, batch: int
                   ) -> StepGraph:
    """The graph of one measured NeuSight configuration (module docstring)."""
    spec = model_spec(model_config(folder, model), model)
    head = None
    if spec.family == "bert":
        head = "pretraining" if mode == "train" else "classification"
    return build_step_graph(spec, mode, seq_len, batch, "fp32", head=head,
                            accumulate_grads=True, optimizer="none")


def step_rows(folder: Path | str) -> tuple[pd.DataFrame, list[StepGraph]]:
    """The measured steps (``group`` added) and their graphs, row by row."""
    rows = read_step_times(folder)
    rows["group"] = rows["device"].map(lambda d: HELD_OUT_GROUP.get(d, d))
    graphs = [neusight_graph(folder, r.model, r.mode, r.seq_len, r.batch)
              for r in rows.itertuples()]
    return rows, graphs


def times_for(rows: pd.DataFrame, graphs: list[StepGraph], model: KernelModel
              ) -> list[KernelTimes]:
    """Kernel predictions of every row's graph on its device."""
    return [kernel_times(g, BUILTIN_DEVICES[str(d)], model)
            for g, d in zip(graphs, rows["device"], strict=True)]


def _predict(times: list[KernelTimes], terms: StepTerms) -> np.ndarray:
    return np.array([t.phase_s(terms, "forward") + t.phase_s(terms, "backward")
                     for t in times])


MAX_LAUNCH_TERM_US = 100.0
"""Upper bound of the host launch floor, us."""


def timer_cost(frame: pd.DataFrame, exclude: Sequence[str] = ()) -> dict[str, float]:
    """``delta_kind`` (s): per kernel kind, the median over devices (not in ``exclude``) of
    the shortest measured kernel, less :data:`~workbench.compute.step.GPU_LAUNCH_S`."""
    f = frame[~frame["group"].isin(list(exclude))]
    floor = f.groupby(["kind", "group"])["time_s"].min().groupby(level=0).median()
    return {str(k): max(float(v) - GPU_LAUNCH_S, 0.0) for k, v in floor.items()}


def fit_launch_terms(times: list[KernelTimes], measured: np.ndarray, delta: Mapping[str, float],
                     base: StepTerms | None = None) -> StepTerms:
    """The host launch floor ``l`` (in [0, 100] us) minimising the robust squared log error
    of forward + backward against the measured steps, with the timer costs ``delta`` given."""
    y = np.log(measured)
    start = replace(base or StepTerms(), delta_s=dict(delta))

    def res(theta: np.ndarray) -> np.ndarray:
        return np.log(_predict(times, replace(start, launch_s=float(theta[0]) * 1e-6))) - y

    fit = least_squares(res, np.array([5.0]), bounds=([0.0], [MAX_LAUNCH_TERM_US]),
                        loss="soft_l1", f_scale=LOSS_SCALE)
    return replace(start, launch_s=float(fit.x[0]) * 1e-6)


def model_lodo(rows: pd.DataFrame, graphs: list[StepGraph],
               without: Mapping[str, KernelModel], frame: pd.DataFrame) -> pd.DataFrame:
    """Each group's steps predicted with the kernel model and launch terms fitted without
    it (``frame``: the kernel measurements, for the timer costs); ``pred_s`` (the model),
    ``pred_roofline_s`` (every kernel at its roofline, no launch terms), ``pred_kernels_s``
    (the held-out kernel model, no launch terms)."""
    out = rows.copy()
    out["pred_s"] = np.nan
    out["pred_kernels_s"] = np.nan
    roof = times_for(rows, graphs, ROOFLINE_KERNELS)
    out["pred_roofline_s"] = _predict(roof, StepTerms())
    measured = rows["step_time_s"].to_numpy(float)
    for g in sorted(rows["group"].unique()):
        if g not in without:
            continue
        times = times_for(rows, graphs, without[g])
        train = (rows["group"] != g).to_numpy()
        terms = fit_launch_terms([t for t, k in zip(times, train, strict=True) if k],
                                 measured[train], timer_cost(frame, exclude=[g]))
        held = ~train
        held_times = [t for t, k in zip(times, held, strict=True) if k]
        out.loc[held, "pred_s"] = _predict(held_times, terms)
        out.loc[held, "pred_kernels_s"] = _predict(held_times, StepTerms())
        log.info("%s held out: launch floor %.1f us", g, 1e6 * terms.launch_s)
    return out


def interval(lodo: pd.DataFrame, mode: str) -> tuple[float, float]:
    """5-95 % of ``log(measured / predicted)`` over held-out rows of ``mode`` (all rows
    where the mode has fewer than ten; never narrower than the pooled range)."""
    r = lodo[lodo["pred_s"].notna()]
    lr = np.log(r["step_time_s"] / r["pred_s"])
    pooled = (float(np.quantile(lr, 0.05)), float(np.quantile(lr, 0.95)))
    sel = lr[r["mode"] == mode]
    if len(sel) < 10:  # too few for quantiles: the pooled range, stretched to cover them
        lo = float(sel.min()) if len(sel) else 0.0
        hi = float(sel.max()) if len(sel) else 0.0
        return min(pooled[0], lo), max(pooled[1], hi)
    return (min(pooled[0], float(np.quantile(sel, 0.05))),
            max(pooled[1], float(np.quantile(sel, 0.95))))


@dataclass(frozen=True)
class TransformerTraining:
    """What :func:`train_transformer_predictor` fitted and measured."""

    kernels: KernelTraining
    terms: StepTerms
    lodo: pd.DataFrame
    half_errors: pd.DataFrame


def train_transformer_predictor(profiles_dir: Path | str, sync: SyncModel,
                                kernels_out: Path | str | None = None,
                                terms_out: Path | str | None = None,
                                candidates: Sequence[tuple[str, tuple[str, ...]]] = CANDIDATES
                                ) -> TransformerTraining:
    """``workbench compute train``'s transformer part: the kernel model (form chosen per
    kind by leave-one-device-out), model-level leave-one-device-out, the launch terms on
    every measured step, the interval and the BF16 widening; written where given."""
    frame = kernel_frame(profiles_dir)
    kt = train_kernel_model(frame, candidates)
    rows, graphs = step_rows(profiles_dir)
    lodo = model_lodo(rows, graphs, kt.without, frame)
    terms = fit_launch_terms(times_for(rows, graphs, kt.model),
                             rows["step_time_s"].to_numpy(float), timer_cost(frame))
    widening, half = half_precision_widening(kt.model, profiles_dir)
    terms = replace(terms, interval_train=interval(lodo, "train"),
                    interval_inference=interval(lodo, "inference"), bf16_widening=widening,
                    sync=sync, trained_on={
                        "step_rows": int(len(rows)), "devices": sorted(rows["device"].unique()),
                        "models": sorted(rows["model"].unique()),
                        "kernel_choice": dict(kt.model.trained_on.get("choice", {})),
                        "source": "NeuSight step_times (MIT); sync: the Pollux apps' fit"})
    if kernels_out is not None:
        write_kernel_model(kt.model, kernels_out)
    if terms_out is not None:
        write_step_terms(terms, terms_out)
    return TransformerTraining(kt, terms, lodo, half)
