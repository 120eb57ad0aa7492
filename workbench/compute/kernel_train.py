"""Train the kernel-level predictor on NeuSight's measured kernels; validate it per device.

For every kernel kind the candidates of :data:`CANDIDATES` (a model form and the device
figures it may read) are scored by leave-one-device-out cross-validation over the five
measured GPUs (Tesla P4, P100, T4, V100, A100; both A100 PCIe cards are held out
together): each device's kernels are predicted by a model fitted on the other devices only.
The candidate with the lowest mean over devices of the median absolute percentage error
wins and is refitted on every device. The target is ``log(t / t_roof)`` (clipped at 0;
:mod:`workbench.compute.kernels`); each device weighs the same.

Training reads no deep-learning framework: LightGBM fits the trees, scikit-learn the MLP
and the ridge regression, and the result is stored as arrays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.compute.devices import BUILTIN_DEVICES, DeviceSpec
from workbench.compute.kernels import (
    KINDS,
    FloatArray,
    KernelModel,
    KindModel,
    Mlp,
    QuadRidge,
    Regressor,
    TreeEnsemble,
    flops_bytes,
    kernel_features,
)
from workbench.compute.neusight import HELD_OUT_GROUP, read_kernels

log = logging.getLogger(__name__)

CANDIDATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gbm", ("tdp",)),
    ("gbm", ("tdp", "clock")),
    ("gbm", ("tdp", "peak_sm")),
    ("ridge", ("tdp", "clock")),
)
"""(form, device features) tried per kind by ``workbench compute train``."""

MLP_CANDIDATE = ("mlp", ("tdp", "clock"))
"""Also scored by ``bench/compute_validation.py --with-mlp``: on the GEMM kinds it
extrapolates far worse to a held-out device than the trees (leave-one-device-out mean median
APE 8x larger on ``linear``) and takes ten times as long, so training leaves it out."""

MAX_ROWS = 24_000
"""Rows a fit draws (uniformly, seeded) from its training devices: enough for the trees,
and it keeps ``workbench compute train`` within minutes on two cores."""

GBM_PARAMS: Mapping[str, Any] = {"n_estimators": 200, "learning_rate": 0.06,
                                 "num_leaves": 15, "min_child_samples": 40,
                                 "subsample": 0.8, "subsample_freq": 1,
                                 "colsample_bytree": 0.8, "reg_lambda": 1.0}
MLP_PARAMS: Mapping[str, Any] = {"hidden_layer_sizes": (32, 32), "alpha": 1e-3,
                                 "max_iter": 200, "early_stopping": True}


def kernel_frame(folder: Path | str) -> pd.DataFrame:
    """NeuSight's kernels with ``flops``, ``bytes`` (FP32) and ``group`` (the held-out
    unit: the device, both A100 cards as ``A100``)."""
    k = read_kernels(folder)
    parts = []
    for kind, g in k.groupby("kind", sort=False):
        dims = g[[f"d{i}" for i in range(7)]].to_numpy(np.int64)
        f, b = flops_bytes(str(kind), dims, list(g["op"]))
        parts.append(g.assign(flops=f, bytes=b))
    out = pd.concat(parts).sort_index()
    out["group"] = out["device"].map(lambda d: HELD_OUT_GROUP.get(d, d))
    return out


def design(frame: pd.DataFrame, kind: str, device_features: Sequence[str],
           devices: Mapping[str, DeviceSpec] = BUILTIN_DEVICES
           ) -> tuple[FloatArray, FloatArray]:
    """Features and ``t_roof`` of ``frame``'s rows (one kind), device by device."""
    x = np.zeros((0, 0))
    roof = np.zeros(len(frame))
    blocks = []
    for dev, idx in frame.groupby("device", sort=False).indices.items():
        g = frame.iloc[idx]
        xi, ri = kernel_features(kind, g[[f"d{i}" for i in range(7)]].to_numpy(np.int64),
                                 g["flops"].to_numpy(float), g["bytes"].to_numpy(float),
                                 list(g["op"]), devices[str(dev)], device_features)
        blocks.append((idx, xi))
        roof[idx] = ri
    x = np.zeros((len(frame), blocks[0][1].shape[1]))
    for idx, xi in blocks:
        x[idx] = xi
    return x, roof


def _flatten(root: Mapping[str, Any]) -> tuple[list[int], list[float], list[list[int]],
                                               list[float]]:
    """One LightGBM tree as (split features, thresholds, children, leaf values); a child
    below 0 is leaf ``-1 - child``."""
    feat: list[int] = []
    thr: list[float] = []
    kids: list[list[int]] = []
    leaves: list[float] = []

    def walk(node: Mapping[str, Any]) -> int:
        if "leaf_value" in node:
            leaves.append(float(node["leaf_value"]))
            return -len(leaves)
        i = len(feat)
        feat.append(int(node["split_feature"]))
        thr.append(float(node["threshold"]))
        kids.append([0, 0])
        kids[i][0] = walk(node["left_child"])
        kids[i][1] = walk(node["right_child"])
        return i

    top = walk(root)
    if top < 0:  # a tree that is one leaf: a dummy split sending everything left
        feat, thr, kids = [0], [np.inf], [[top, top]]
    return feat, thr, kids, leaves


def _trees(booster: Any) -> TreeEnsemble:
    """LightGBM's trees as :class:`TreeEnsemble` arrays."""
    parsed = [_flatten(t["tree_structure"]) for t in booster.dump_model()["tree_info"]]
    n_nodes = max(len(p[0]) for p in parsed)
    n_leaves = max(len(p[3]) for p in parsed)
    shape = (len(parsed), n_nodes)
    feature = np.zeros(shape, np.int32)
    threshold = np.full(shape, np.inf)
    left = np.full(shape, -1, np.int32)
    right = np.full(shape, -1, np.int32)
    leaf = np.zeros((len(parsed), n_leaves))
    for t, (f, th, k, lv) in enumerate(parsed):
        feature[t, :len(f)] = f
        threshold[t, :len(f)] = th
        left[t, :len(f)] = [c[0] for c in k]
        right[t, :len(f)] = [c[1] for c in k]
        leaf[t, :len(lv)] = lv
    return TreeEnsemble(feature, threshold, left, right, leaf)


def fit_regressor(form: str, x: FloatArray, y: FloatArray, seed: int = 0) -> Regressor:
    """Fit one model form and return it as arrays (:mod:`workbench.compute.kernels`)."""
    if form == "gbm":
        import lightgbm as lgb

        m = lgb.LGBMRegressor(**GBM_PARAMS, random_state=seed, n_jobs=1, verbose=-1)
        m.fit(x, y)
        return _trees(m.booster_)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    z = (x - mean) / scale
    if form == "mlp":
        from sklearn.neural_network import MLPRegressor

        mlp = MLPRegressor(**MLP_PARAMS, random_state=seed).fit(z, y)
        return Mlp(mean, scale, tuple(np.asarray(w) for w in mlp.coefs_),
                   tuple(np.asarray(b) for b in mlp.intercepts_))
    if form == "ridge":
        from sklearn.linear_model import Ridge

        r = Ridge(alpha=1.0).fit(QuadRidge.expand(z), y)
        return QuadRidge(mean, scale, np.asarray(r.coef_, dtype=float), float(r.intercept_))
    raise ValueError(f"unknown model form {form!r}; use gbm, mlp or ridge")


def _sample(idx: np.ndarray, groups: np.ndarray, seed: int) -> np.ndarray:
    """At most :data:`MAX_ROWS` of ``idx``, the same share from each group."""
    if len(idx) <= MAX_ROWS:
        return idx
    rng = np.random.default_rng(seed)
    uniq = np.unique(groups[idx])
    per = MAX_ROWS // len(uniq)
    parts = []
    for g in uniq:
        gi = idx[groups[idx] == g]
        parts.append(gi if len(gi) <= per else rng.choice(gi, per, replace=False))
    return np.sort(np.concatenate(parts))


def fit_kind(frame: pd.DataFrame, kind: str, form: str, device_features: Sequence[str],
             exclude: Sequence[str] = (), seed: int = 0) -> KindModel:
    """``g_kind`` of one candidate fitted on every group but ``exclude``."""
    f = frame[(frame["kind"] == kind) & ~frame["group"].isin(list(exclude))]
    x, roof = design(f, kind, device_features)
    y = np.maximum(np.log(f["time_s"].to_numpy(float) / roof), 0.0)
    idx = _sample(np.arange(len(f)), f["group"].to_numpy(), seed)
    return KindModel(kind, form, tuple(device_features), fit_regressor(form, x[idx], y[idx],
                                                                       seed))


def lodo_predictions(frame: pd.DataFrame, kind: str, form: str,
                     device_features: Sequence[str], groups: Sequence[str] | None = None
                     ) -> tuple[pd.DataFrame, dict[str, KindModel]]:
    """Each group's kernels of ``kind`` predicted by a model fitted without that group:
    ``group, device, time_s, pred_s, roof_s``; and those models by held-out group."""
    f = frame[frame["kind"] == kind]
    out = []
    models: dict[str, KindModel] = {}
    for g in groups or sorted(f["group"].unique()):
        m = models[g] = fit_kind(frame, kind, form, device_features, exclude=[g])
        held = f[f["group"] == g]
        x, roof = design(held, kind, device_features)
        out.append(pd.DataFrame({"group": g, "device": held["device"].to_numpy(),
                                 "time_s": held["time_s"].to_numpy(float),
                                 "pred_s": roof * np.exp(m.log_slowdown(x)),
                                 "roof_s": roof}, index=held.index))
    return pd.concat(out), models


def cv_score(pred: pd.DataFrame) -> float:
    """Mean over held-out groups of the median APE (each device weighs the same)."""
    ape = (pred["pred_s"] - pred["time_s"]).abs() / pred["time_s"]
    return float(ape.groupby(pred["group"]).median().mean())


@dataclass(frozen=True)
class KernelTraining:
    """What :func:`train_kernel_model` returns.

    Attributes
    ----------
    model : KernelModel
        The winners refitted on every device.
    scores : pandas.DataFrame
        ``kind, form, device_features, score`` of every candidate.
    held_out : pandas.DataFrame
        The winners' leave-one-device-out predictions (the kernel-level validation).
    without : Mapping[str, KernelModel]
        The winners fitted without each group (for model-level leave-one-device-out).
    """

    model: KernelModel
    scores: pd.DataFrame
    held_out: pd.DataFrame
    without: Mapping[str, KernelModel]


def train_kernel_model(frame: pd.DataFrame,
                       candidates: Sequence[tuple[str, tuple[str, ...]]] = CANDIDATES,
                       kinds: Sequence[str] = KINDS) -> KernelTraining:
    """Choose each kind's candidate by leave-one-device-out error, refit it on every
    device (module docstring)."""
    f = frame
    scores, held, kinds_out = [], [], {}
    per_group: dict[str, dict[str, KindModel]] = {}
    for kind in kinds:
        if not (f["kind"] == kind).any():
            continue
        best: tuple[float, str, tuple[str, ...], pd.DataFrame,
                    dict[str, KindModel]] | None = None
        for form, feats in candidates:
            t0 = time.perf_counter()
            pred, models = lodo_predictions(f, kind, form, feats)
            s = cv_score(pred)
            scores.append({"kind": kind, "form": form, "device_features": ",".join(feats),
                           "score": s})
            log.info("%s %s %s: LODO mean median APE %.1f%% (%.0f s)", kind, form,
                     ",".join(feats), 100 * s, time.perf_counter() - t0)
            if best is None or s < best[0]:
                best = (s, form, feats, pred, models)
        assert best is not None
        kinds_out[kind] = fit_kind(f, kind, best[1], best[2])
        held.append(best[3].assign(kind=kind))
        for g, m in best[4].items():
            per_group.setdefault(g, {})[kind] = m
    model = KernelModel(kinds_out, {
        "rows": int(len(f)), "groups": sorted(f["group"].unique()),
        "choice": {k: f"{m.form}({','.join(m.device_features)})" for k, m in
                   kinds_out.items()},
        "source": "NeuSight kernels (../shared/data/profiles/neusight/kernels, MIT)"})
    without = {g: KernelModel(m, {"excluded": g}) for g, m in per_group.items()}
    return KernelTraining(model, pd.DataFrame(scores), pd.concat(held), without)


HALF_GEMM_FILES: Mapping[str, str] = {"DeepBench_NV_V100.xlsx": "V100",
                                      "DeepBench_NV_T4.xlsx": "T4"}
"""DeepBench files with a tensor-core FP16 sheet (16-bit inputs, FP32 accumulation)."""


def half_precision_widening(model: KernelModel, profiles_dir: Path | str
                            ) -> tuple[float, pd.DataFrame]:
    """How much wider the error of GEMMs in 16-bit tensor-core arithmetic is than in FP32.

    The FP32-trained ``linear`` model predicts DeepBench's GEMMs on V100 and T4 twice: the
    FP32 sheet with the FP32 peak and 4-byte operands, the FP16 sheet with the tensor-core
    peak and 2-byte operands (as BF16 is extrapolated). The factor is the ratio of the
    5-95 % ranges of ``log(measured / predicted)`` (at least 1); the rows come back too.
    """
    from workbench.compute.train import read_deepbench

    d = Path(profiles_dir)
    if (d / "deepbench").is_dir():
        d = d / "deepbench"
    rows = []
    for f, dev_name in HALF_GEMM_FILES.items():
        if not (d / f).is_file():
            continue
        for half in (False, True):
            k = read_deepbench(d / f, dev_name, half=half)
            g = k[k["kind"] == "gemm"]
            # DeepBench lists M, N, K of an M x N result reduced over K; 2 M N K = flops
            rows.append(g.assign(precision="fp16" if half else "fp32"))
    if not rows:
        raise FileNotFoundError(f"no DeepBench FP16 sheets in {d}")
    frame = pd.concat(rows, ignore_index=True)
    out = []
    for (dev_name, prec), g in frame.groupby(["device", "precision"]):
        # DeepBench's M x N result reduced over K: Kernel's (1, M, N, K)
        dims = np.column_stack([np.ones(len(g)), g["m"], g["n"], g["k"]]).astype(np.int64)
        width = 2 if prec == "fp16" else 4
        fl = (2.0 * dims[:, 1] * dims[:, 2] * dims[:, 3]).astype(np.float64)
        by = width * (dims[:, 1] * dims[:, 3] + dims[:, 3] * dims[:, 2]
                      + dims[:, 1] * dims[:, 2]).astype(float)
        full = np.zeros((len(g), 7), dtype=np.int64)
        full[:, :4] = dims
        pred, _ = model.predict_s("linear", full, fl, by, None, BUILTIN_DEVICES[str(dev_name)],
                                  str(prec))
        out.append(pd.DataFrame({"device": dev_name, "precision": prec,
                                 "log_error": np.log(g["time_s"].to_numpy(float) / pred)}))
    err = pd.concat(out, ignore_index=True)

    def spread(p: str) -> float:
        e = err.loc[err["precision"] == p, "log_error"]
        return float(np.quantile(e, 0.95) - np.quantile(e, 0.05))

    return max(1.0, spread("fp16") / spread("fp32")), err
