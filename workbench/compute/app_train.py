"""Both predictors of the Pollux apps, leave one device out, and the per-app choice.

Every measured step time of the apps (Zeus: one GPU of A40, P100, RTX 6000, V100; Pollux:
the T4, 1 to 64 GPUs; :func:`workbench.compute.train.read_step_times`) is predicted by

* the graph model fitted without any of the device's data (its DeepBench kernels and step
  times; :func:`workbench.compute.train.leave_one_device_out`, with the app's offset from
  the other devices, as shipped), and
* the kernel model (:mod:`workbench.compute.apps`) fitted without the device's NeuSight
  kernels (each kind's shipped form and features refitted; A40 and RTX 6000 were never in
  NeuSight, so the shipped model is held out for them), with timer costs and the launch
  floor from the other devices' kernels and steps.

On several GPUs both take the same all-reduce (fitted without the row's app, as the graph
model's validation does), so they differ in the compute only. :func:`choose` then picks
per app: the kernel model where its held-out median APE is lower on one GPU and not higher
on 2-8 GPUs of a node, else the graph model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.compute.apps import (
    AppChoice,
    KernelPath,
    kernel_unrepresentable,
    predict_app_step,
)
from workbench.compute.devices import BUILTIN_DEVICES
from workbench.compute.graph import Graph
from workbench.compute.kernels import KernelModel, read_kernel_model
from workbench.compute.predict import Coefficients, SyncModel
from workbench.compute.step import read_step_terms

log = logging.getLogger(__name__)

CONFIGS = ("1 GPU", "2-8 GPUs, 1 node", "multi-node")


def config_class(gpus: pd.Series, nodes: pd.Series) -> np.ndarray:
    return np.where(gpus == 1, CONFIGS[0], np.where(nodes == 1, CONFIGS[1], CONFIGS[2]))


def held_out_kernel_paths(neusight: Path, devices: list[str]) -> dict[str, KernelPath]:
    """Per device with NeuSight kernels, the kernel model (shipped forms) and step terms
    fitted without it; other devices are absent (the shipped path never saw them)."""
    from dataclasses import replace

    from workbench.compute.kernel_train import fit_kind, kernel_frame
    from workbench.compute.step_train import fit_launch_terms, step_rows, timer_cost, times_for

    shipped = read_kernel_model()
    frame = kernel_frame(neusight)
    groups = set(frame["group"].unique())
    rows, graphs = step_rows(neusight)
    base = read_step_terms()
    out = {}
    for dev in devices:
        if dev not in groups:
            continue
        model = KernelModel({k: fit_kind(frame, k, m.form, m.device_features, exclude=[dev])
                             for k, m in shipped.kinds.items()}, {"excluded": dev})
        keep = (rows["group"] != dev).to_numpy()
        r = rows[keep]
        g = [x for x, k in zip(graphs, keep, strict=True) if k]
        terms = fit_launch_terms(times_for(r, g, model), r["step_time_s"].to_numpy(float),
                                 timer_cost(frame, exclude=[dev]), base)
        out[dev] = KernelPath(model, replace(terms, sync=base.sync))
        log.info("kernel model without %s: launch floor %.1f us", dev, 1e6 * terms.launch_s)
    return out


def _kernel_predictions(steps: pd.DataFrame, graphs: Mapping[str, Graph],
                        paths: Mapping[str, KernelPath], sync_wo: Mapping[str, SyncModel]
                        ) -> pd.Series:
    shipped = KernelPath.shipped()
    out = pd.Series(np.nan, index=steps.index)
    cache: dict[tuple[str, str, int, int, int], float] = {}
    for i, r in steps.iterrows():
        g = graphs[str(r["graph"])]
        if kernel_unrepresentable(g):
            continue
        key = (str(r["graph"]), str(r["device"]), int(r["gpus"]), int(r["nodes"]),
               int(r["local_batch"]))
        if key not in cache:
            coef = Coefficients(kernel_weights={}, sync=sync_wo.get(str(r["app"]), SyncModel()))
            cache[key] = predict_app_step(
                g, BUILTIN_DEVICES[key[1]], key[2], key[4], coef, nodes=key[3],
                predictor="kernel", kernel_path=paths.get(key[1], shipped),
                choices={}).step_time_s
        out[i] = cache[key]
    return out


def held_out_predictions(profiles_dir: Path | str) -> pd.DataFrame:
    """Every measured app step with ``graph`` (the graph model, device held out) and
    ``kernel`` (the kernel model, device held out; NaN where it cannot represent the app),
    and ``config`` (:data:`CONFIGS`)."""
    from workbench.compute.train import (
        fit_sync,
        leave_one_device_out,
        load_graphs,
        read_all_deepbench,
        read_step_times,
    )

    root = Path(profiles_dir)
    steps = read_step_times(root)
    graphs = load_graphs(steps["graph"].unique())
    lodo = leave_one_device_out(read_all_deepbench(root), steps, graphs)
    sync_wo = {a: fit_sync(steps[steps["app"] != a], graphs, BUILTIN_DEVICES)
               for a in steps.loc[steps["gpus"] > 1, "app"].unique()}
    paths = held_out_kernel_paths(root / "neusight", sorted(steps["device"].unique()))
    out = lodo[["source", "graph", "app", "device", "gpus", "nodes", "local_batch",
                "step_time_s"]].copy()
    out["graph_pred"] = lodo["pred"]
    out["kernel_pred"] = _kernel_predictions(steps, graphs, paths, sync_wo)
    out["config"] = config_class(out["gpus"], out["nodes"])
    return out


def errors(pred: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and max APE of both predictors (rows, and where the kernel model answers)."""
    p = pred.assign(graph_ape=(pred["graph_pred"] - pred["step_time_s"]).abs()
                    / pred["step_time_s"],
                    kernel_ape=(pred["kernel_pred"] - pred["step_time_s"]).abs()
                    / pred["step_time_s"])
    return p.groupby(by).agg(rows=("step_time_s", "size"),
                             graph_median=("graph_ape", "median"),
                             graph_max=("graph_ape", "max"),
                             kernel_median=("kernel_ape", "median"),
                             kernel_max=("kernel_ape", "max")).reset_index()


MIN_INTERVAL_DEVICES = 3
"""Held-out devices the kernel path's own interval needs; with fewer (cifar10 was measured
on one GPU only, the T4) the profile keeps the graph model's wider held-out range."""


def _interval(pred: pd.DataFrame, apps: list[str], multi: bool) -> tuple[float, float] | None:
    r = pred[pred["app"].isin(apps) & ((pred["gpus"] > 1) == multi)
             & pred["kernel_pred"].notna()]
    if r["device"].nunique() < MIN_INTERVAL_DEVICES:
        return None
    lr = np.log(r["step_time_s"] / r["kernel_pred"])
    return float(np.quantile(lr, 0.05)), float(np.quantile(lr, 0.95))


def choose(pred: pd.DataFrame, graphs: Mapping[str, Graph]) -> dict[str, AppChoice]:
    """Per app, the predictor with the lower held-out median APE on one GPU, the kernel
    model only where it is also not worse on 2-8 GPUs of a node (module docstring)."""
    e = errors(pred, ["app", "config"]).set_index(["app", "config"])
    out: dict[str, AppChoice] = {}
    kernel_apps = []
    for app in sorted(pred["app"].unique()):
        why = kernel_unrepresentable(graphs[app])
        figs = {f"{c}: {k}": round(float(e.loc[(app, c), k]), 4)
                for c in CONFIGS if (app, c) in e.index
                for k in ("graph_median", "graph_max", "kernel_median", "kernel_max")
                if np.isfinite(e.loc[(app, c), k])}
        if why:
            out[app] = AppChoice(app, "graph", f"kernel model cannot represent it: {why}",
                                 errors=figs)
            continue
        one = e.loc[(app, CONFIGS[0])]
        multi = e.loc[(app, CONFIGS[1])] if (app, CONFIGS[1]) in e.index else None
        better_one = one["kernel_median"] < one["graph_median"]
        ok_multi = multi is None or multi["kernel_median"] <= multi["graph_median"]
        pick = "kernel" if better_one and ok_multi else "graph"
        reason = (f"held out, 1 GPU median APE: kernel {100 * one['kernel_median']:.1f}% vs "
                  f"graph {100 * one['graph_median']:.1f}%")
        if multi is not None:
            reason += (f"; 2-8 GPUs: kernel {100 * multi['kernel_median']:.1f}% vs graph "
                       f"{100 * multi['graph_median']:.1f}%")
        out[app] = AppChoice(app, pick, reason, errors=figs)
        if pick == "kernel":
            kernel_apps.append(app)
    i1, im = _interval(pred, kernel_apps, False), _interval(pred, kernel_apps, True)
    from dataclasses import replace

    return {a: (replace(c, interval_1gpu=i1, interval_multi=im) if c.predictor == "kernel"
                else c) for a, c in out.items()}
