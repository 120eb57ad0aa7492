"""Kernel-level predictor: a learned fraction of the roofline each kernel attains.

For a kernel of ``F`` FLOPs moving ``B`` bytes on a device of peak ``P`` FLOP/s (at the
kernel's precision; GEMM kinds use the tensor-core peak in BF16) and memory bandwidth
``W`` byte/s::

    t_roof = max(F_min / P, B / W)
    t      = t_roof / u,        u = exp(-max(g_kind(x), 0))  in (0, 1]

``F_min`` is ``F`` except for 3x3 stride-1 convolutions, which cuDNN runs as Winograd
``F(4x4, 3x3)`` transforms needing a quarter of the multiplications (Lavin and Gray,
*Fast Algorithms for Convolutional Neural Networks*, CVPR 2016), so that the bound holds
for them too. ``u`` is the attainable fraction of the roofline; ``g_kind`` is learned per
kernel kind (``linear``, ``bmm``, ``conv``, ``ln``, ``softmax``, ``elementwise``) on
measured kernels from features of the kernel's shape and the device's datasheet, and the
clip at 0 makes the predicted time never shorter than the roofline. This is the idea of
NeuSight (Lee et al., ASPLOS 2025: predict a kernel's utilisation from its tiles and the
device, bounded by the hardware), built here from the paper's description.

Features (:func:`kernel_features`): for matrix products (and convolutions as implicit
GEMMs with ``M = B P Q``, ``N = C_out``, ``K = C_in k^2``) the output tiles of 128x128,
64x64 and 32x32 over the device's SMs (``log2`` waves and the last wave's fill), ``log2``
of ``M, N, K`` and the batch, FLOPs and bytes; for the memory-bound kinds the element
count, rows and columns against the SMs, bytes, inputs per output and whether the op is
transcendental; for all, ``log10`` of the arithmetic intensity over the device's ridge
point ``P / W``, of ``t_roof`` (small kernels are launch-bound), and the device figures a
candidate feature set names (:data:`DEVICE_FEATURES`: board power, clock, peak per SM,
bandwidth, working set over L2).

Three model forms are shipped as plain arrays and evaluated with numpy
(:class:`KernelModel`): gradient-boosted trees (fitted with LightGBM), a small MLP and a
quadratic ridge regression (fitted with scikit-learn); :mod:`workbench.compute.kernel_train`
chooses form and feature set per kind by leave-one-device-out cross-validation.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench.compute.devices import DeviceSpec
from workbench.units import KILO

FloatArray = NDArray[np.float64]

KINDS: tuple[str, ...] = ("linear", "bmm", "conv", "ln", "softmax", "elementwise")
GEMM_KINDS = ("linear", "bmm", "conv")
TRANSCENDENTAL = frozenset({"gelu", "tanh", "pow", "silu", "exp", "rsqrt"})
BINARY = frozenset({"binary"})
DEVICE_FEATURES: tuple[str, ...] = ("tdp", "clock", "peak_sm", "bw", "l2")
"""``tdp`` log10 board power (W): the 70-75 W cards hold their clocks under load less;
``clock`` boost clock (GHz); ``peak_sm`` log10 peak FLOP/s per SM; ``bw`` log10 memory
bandwidth; ``l2`` log10 of the kernel's bytes over the L2 size."""

KERNEL_MODEL_SCHEMA_VERSION = 1


def conv_output(dims: NDArray[np.int64]) -> FloatArray:
    """Output height (= width) ``floor((H + 2 pad - k) / stride) + 1`` of ``conv`` dims
    ``(B, C_in, C_out, k, H, stride, pad)``."""
    d = dims.astype(float)
    return np.floor((d[:, 4] + 2 * d[:, 6] - d[:, 3]) / np.maximum(d[:, 5], 1)) + 1


def flops_bytes(kind: str, dims: NDArray[np.int64], op: Sequence[str] | None = None,
                width: int = 4) -> tuple[FloatArray, FloatArray]:
    """FLOPs and bytes of measured kernels from their dims (``width`` bytes per number):
    GEMMs ``2 B M N K`` and ``w B (M K + K N + M N)``; conv direct FLOPs ``2 B C_in C_out
    k^2 P^2`` and input + filter + output; norms and softmax 5 FLOPs and 2 numbers per
    element; element-wise 1 FLOP and ``(inputs + 1)`` numbers per element."""
    d = dims.astype(float)
    if kind in ("linear", "bmm"):
        b, m, n, k = d[:, 0], d[:, 1], d[:, 2], d[:, 3]
        return 2 * b * m * n * k, width * b * (m * k + k * n + m * n)
    if kind == "conv":
        p = conv_output(dims)
        b, c, o, ks, h = d[:, 0], d[:, 1], d[:, 2], d[:, 3], d[:, 4]
        return (2 * b * c * o * ks * ks * p * p,
                width * (b * c * h * h + o * c * ks * ks + b * o * p * p))
    if kind in ("ln", "softmax"):
        n = d[:, 0] * d[:, 1]
        return 5 * n, 2 * width * n
    n = d[:, 0]
    n_in = np.array([2.0 if o in BINARY else 1.0 for o in (op or [""] * len(n))])
    return n, width * n * (n_in + 1)


def _peak(kind: str, dev: DeviceSpec, precision: str) -> float:
    """FLOP/s the roofline uses: the precision's peak for GEMM kinds (BF16 or FP16 on
    tensor cores), FP32 vector peak for the rest."""
    if kind in GEMM_KINDS and precision in ("bf16", "fp16"):
        return dev.peak_tflops(precision) * 1e12
    return dev.fp32_tflops * 1e12


def roofline_s(kind: str, flops: FloatArray, nbytes: FloatArray, dims: NDArray[np.int64],
               dev: DeviceSpec, precision: str = "fp32") -> FloatArray:
    """``t_roof = max(F_min / P, B / W)``, s (module docstring; Winograd bound for 3x3
    stride-1 convolutions)."""
    f = np.asarray(flops, dtype=float)
    if kind == "conv":
        wino = (dims[:, 3] == 3) & (dims[:, 5] == 1)
        f = np.where(wino, f / 4.0, f)
    return np.maximum(f / _peak(kind, dev, precision),
                      np.asarray(nbytes, dtype=float) / (dev.mem_bw_gb_s * 1e9))


def _tiles(b: FloatArray, m: FloatArray, n: FloatArray, sms: float) -> list[FloatArray]:
    out = []
    for t in (128.0, 64.0, 32.0):
        tiles = b * np.ceil(m / t) * np.ceil(n / t)
        waves = tiles / sms
        out += [np.log2(waves), tiles / (np.ceil(waves) * sms)]
    return out


def kernel_features(kind: str, dims: NDArray[np.int64], flops: FloatArray,
                    nbytes: FloatArray, op: Sequence[str] | None, dev: DeviceSpec,
                    device_features: Sequence[str], precision: str = "fp32"
                    ) -> tuple[FloatArray, FloatArray]:
    """Feature matrix (one row per kernel) and ``t_roof`` (module docstring)."""
    d = np.maximum(dims.astype(float), 1.0)
    f = np.maximum(np.asarray(flops, dtype=float), 1.0)
    by = np.maximum(np.asarray(nbytes, dtype=float), 1.0)
    t_roof = roofline_s(kind, f, by, dims, dev, precision)
    sms = float(dev.sm_count)
    peak = _peak(kind, dev, precision)
    ridge = peak / (dev.mem_bw_gb_s * 1e9)
    cols: list[FloatArray]
    if kind in ("linear", "bmm"):
        b, m, n, k = d[:, 0], d[:, 1], d[:, 2], d[:, 3]
        cols = [np.log10(f), np.log10(by), *_tiles(b, m, n, sms),
                np.log2(m), np.log2(n), np.log2(k), np.log2(b)]
    elif kind == "conv":
        p = np.maximum(conv_output(dims), 1.0)
        m, n, k = d[:, 0] * p * p, d[:, 2], d[:, 1] * d[:, 3] ** 2
        cols = [np.log10(f), np.log10(by), *_tiles(np.ones_like(m), m, n, sms),
                np.log2(m), np.log2(n), np.log2(k), np.log2(d[:, 4]), np.log2(d[:, 1]),
                d[:, 3], d[:, 5]]
    elif kind in ("ln", "softmax"):
        rows, cc = d[:, 0], d[:, 1]
        cols = [np.log10(rows * cc), np.log2(rows), np.log2(cc), np.log2(rows / sms),
                np.log10(by)]
    else:
        n = d[:, 0]
        ops = list(op) if op is not None else [""] * len(n)
        cols = [np.log10(n), np.log10(by), np.log2(n / (512.0 * sms)),
                np.array([2.0 if o in BINARY else 1.0 for o in ops]),
                np.array([1.0 if o in TRANSCENDENTAL else 0.0 for o in ops])]
    cols += [np.log10(f / by / ridge), np.log10(t_roof)]
    dev_cols = {"tdp": math.log10(dev.tdp_w), "clock": (dev.clock_mhz or 1500.0) / KILO,
                "peak_sm": math.log10(peak / sms), "bw": math.log10(dev.mem_bw_gb_s * 1e9)}
    for name in device_features:
        if name == "l2":
            cols.append(np.log10(by / dev.l2_bytes))
        else:
            cols.append(np.full(len(d), dev_cols[name]))
    return np.column_stack(cols), t_roof


# --------------------------------------------------------------------------- model forms


@dataclass(frozen=True)
class TreeEnsemble:
    """Gradient-boosted regression trees as arrays: node ``i`` splits on ``feature[i]`` at
    ``threshold[i]`` (``x <= threshold`` goes ``left``), a negative child ``-1 - j`` is
    leaf ``j`` of that tree; the prediction is the sum of the trees' leaves."""

    feature: NDArray[np.int32]  # (trees, nodes)
    threshold: FloatArray
    left: NDArray[np.int32]
    right: NDArray[np.int32]
    leaf: FloatArray  # (trees, leaves)

    def predict(self, x: FloatArray) -> FloatArray:
        """The sum of the trees' leaves for each row of ``x`` (in chunks of 256 rows)."""
        if len(x) > 256:
            return np.concatenate([self._predict(x[i:i + 256]) for i in range(0, len(x), 256)])
        return self._predict(x)

    def _predict(self, x: FloatArray) -> FloatArray:
        """All trees walked at once, one level per step (a node index below 0 is a
        leaf reached)."""
        n, n_trees = len(x), self.feature.shape[0]
        trees = np.arange(n_trees)[None, :]
        rows = np.arange(n)[:, None]
        node = np.zeros((n, n_trees), dtype=np.int64)
        for _ in range(self.feature.shape[1] + 1):
            inner = node >= 0
            if not inner.any():
                break
            at = np.where(inner, node, 0)
            go_left = x[rows, self.feature[trees, at]] <= self.threshold[trees, at]
            nxt = np.where(go_left, self.left[trees, at], self.right[trees, at])
            node = np.where(inner, nxt, node)
        return self.leaf[trees, -1 - node].sum(axis=1)


@dataclass(frozen=True)
class Mlp:
    """``relu`` multilayer perceptron on standardised inputs: weights ``w[i]``, biases
    ``b[i]``; the last layer is linear."""

    mean: FloatArray
    scale: FloatArray
    weights: tuple[FloatArray, ...]
    biases: tuple[FloatArray, ...]

    def predict(self, x: FloatArray) -> FloatArray:
        h = (x - self.mean) / self.scale
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < len(self.weights) - 1:
                h = np.maximum(h, 0.0)
        return h[:, 0]


@dataclass(frozen=True)
class QuadRidge:
    """Ridge regression on the standardised features, their squares and pairwise products:
    ``y = c0 + sum_i c_i z_i + sum_{i <= j} c_ij z_i z_j``."""

    mean: FloatArray
    scale: FloatArray
    coef: FloatArray
    intercept: float

    @staticmethod
    def expand(z: FloatArray) -> FloatArray:
        i, j = np.triu_indices(z.shape[1])
        return np.hstack([z, z[:, i] * z[:, j]])

    def predict(self, x: FloatArray) -> FloatArray:
        return self.expand((x - self.mean) / self.scale) @ self.coef + self.intercept


Regressor = TreeEnsemble | Mlp | QuadRidge


@dataclass(frozen=True)
class KindModel:
    """The learned ``g_kind`` of one kernel kind: its form, feature set and arrays."""

    kind: str
    form: str  # "gbm", "mlp", "ridge"
    device_features: tuple[str, ...]
    regressor: Regressor

    def log_slowdown(self, x: FloatArray) -> FloatArray:
        """``max(g(x), 0) = log(t / t_roof)``."""
        return np.maximum(self.regressor.predict(x), 0.0)


@dataclass(frozen=True)
class KernelModel:
    """Every kind's model and what it was trained on (``workbench/data/compute/kernels.npz``)."""

    kinds: Mapping[str, KindModel]
    trained_on: Mapping[str, Any] = field(default_factory=dict)

    def predict_s(self, kind: str, dims: NDArray[np.int64], flops: FloatArray,
                  nbytes: FloatArray, op: Sequence[str] | None, dev: DeviceSpec,
                  precision: str = "fp32") -> tuple[FloatArray, FloatArray]:
        """Predicted kernel times and their rooflines, s; the roofline alone for a kind
        without a model."""
        m = self.kinds.get(kind)
        x, t_roof = kernel_features(kind, dims, flops, nbytes, op, dev,
                                    m.device_features if m else (), precision)
        if m is None:
            return t_roof, t_roof
        return t_roof * np.exp(m.log_slowdown(x)), t_roof


ROOFLINE_KERNELS = KernelModel(kinds={})
"""No learning: every kernel at its roofline."""


# --------------------------------------------------------------------------- storage


def _pack(m: KindModel) -> dict[str, np.ndarray]:
    r = m.regressor
    p = f"{m.kind}."
    if isinstance(r, TreeEnsemble):
        return {p + "feature": r.feature, p + "threshold": r.threshold.astype(np.float32),
                p + "left": r.left, p + "right": r.right, p + "leaf": r.leaf.astype(np.float32)}
    if isinstance(r, Mlp):
        out = {p + "mean": r.mean, p + "scale": r.scale}
        for i, (w, b) in enumerate(zip(r.weights, r.biases, strict=True)):
            out[f"{p}w{i}"], out[f"{p}b{i}"] = w.astype(np.float32), b.astype(np.float32)
        return out
    return {p + "mean": r.mean, p + "scale": r.scale, p + "coef": r.coef,
            p + "intercept": np.array([r.intercept])}


def _unpack(kind: str, form: str, feats: Sequence[str], a: Mapping[str, np.ndarray]
            ) -> KindModel:
    p = f"{kind}."
    reg: Regressor
    if form == "gbm":
        reg = TreeEnsemble(a[p + "feature"].astype(np.int32),
                           a[p + "threshold"].astype(float), a[p + "left"].astype(np.int32),
                           a[p + "right"].astype(np.int32), a[p + "leaf"].astype(float))
    elif form == "mlp":
        n = sum(1 for k in a if k.startswith(p + "w"))
        reg = Mlp(a[p + "mean"], a[p + "scale"],
                  tuple(a[f"{p}w{i}"].astype(float) for i in range(n)),
                  tuple(a[f"{p}b{i}"].astype(float) for i in range(n)))
    else:
        reg = QuadRidge(a[p + "mean"], a[p + "scale"], a[p + "coef"],
                        float(a[p + "intercept"][0]))
    return KindModel(kind, form, tuple(feats), reg)


def kernel_model_path() -> Path:
    """Path of the shipped kernel model."""
    return Path(__file__).resolve().parent.parent / "data" / "compute" / "kernels.npz"


def write_kernel_model(model: KernelModel, path: Path | str) -> None:
    """Write the model as one compressed ``.npz`` (arrays plus a JSON header), atomically
    (an interrupted write leaves the old file)."""
    arrays: dict[str, np.ndarray] = {}
    for m in model.kinds.values():
        arrays |= _pack(m)
    header = {"schema_version": KERNEL_MODEL_SCHEMA_VERSION,
              "kinds": {k: {"form": m.form, "device_features": list(m.device_features)}
                        for k, m in model.kinds.items()},
              "trained_on": dict(model.trained_on)}
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, target)


def read_kernel_model(path: Path | str | None = None) -> KernelModel:
    """The shipped (or another file's) kernel model."""
    p = Path(path) if path is not None else kernel_model_path()
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found; train it with `workbench compute train "
                                "--data ../shared/data/profiles`")
    with np.load(p) as z:
        a = {k: z[k] for k in z.files}
    header = json.loads(bytes(a.pop("header")).decode())
    if header.get("schema_version") != KERNEL_MODEL_SCHEMA_VERSION:
        raise ValueError(f"{p} has schema_version {header.get('schema_version')!r}; retrain "
                         "with `workbench compute train`")
    kinds = {k: _unpack(k, v["form"], v["device_features"], a)
             for k, v in header["kinds"].items()}
    return KernelModel(kinds, header.get("trained_on", {}))
