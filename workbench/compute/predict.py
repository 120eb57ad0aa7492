"""Predict a training step's time on a device from the job's computation graph.

Three layers, each with its formula:

1. **Roofline per kernel.** A kernel of ``F`` FLOPs moving ``B`` bytes on a device of peak
   ``P`` FLOP/s (at the job's precision) and memory bandwidth ``W`` byte/s takes at least
   ``t_roof = max(F / P, B / W)``.
2. **Learned kernel correction** (compute kernels: ``conv``, ``gemm``, ``rnn``), trained on
   DeepBench's measured kernels::

       log(t / t_roof) = w_kind . [1, f, f^2, a, p, amd]
       f = clip(log10(F / kernels) - 9, -3, 3)        size of one launched kernel
       a = clip(log10((F / B) / (P / W)), -2, 2)       arithmetic intensity over the ridge
       p = clip(log10(TDP_W / peak_TFLOPS) - 1, -1, 1) power headroom (T4-like boards throttle)

3. **Graph aggregation** of one training step (forward + backward = three kernels of the
   forward cost per operation, plus the optimizer update), with four learned global terms
   trained on measured step times (Zeus on four GPUs, Pollux on T4)::

       T_comp = sum_kind c_kind * sum_{op of kind} 3 t_kernel(op)       kind = conv, gemm, rnn
                + c_m * (sum_memory 3 t_roof(op) + copies * param_bytes / W)
                + l * kernel_launches + t_0

   ``l`` is the host's per-kernel launch cost and ``t_0`` the framework's fixed cost per
   step: neither shrinks on a faster device (the gap in the hand-set factor table). When
   the application was measured on *other* devices, its median log residual there
   (``app_offsets``) multiplies ``T_comp``: the 1-job-to-M-devices conversion.

Sync (data parallel, ring all-reduce of the FP32 gradient, Pollux's split)::

    T_sync = 0                                                   n = 1
             2 (n - 1) / n * G / (eta * B_link) + 2 (n - 1) * lambda     otherwise
    B_link = intra-node bandwidth per GPU (one node), else min(intra, inter-node / 8)
    T_step = (T_comp^gamma + T_sync^gamma)^(1 / gamma)

with ``eta`` (intra/inter), ``lambda`` and ``gamma`` fitted to Pollux's multi-GPU rows.

The prediction interval is the 5-95 % range of the log error ``log(true / predicted)``
on devices held out of training (:mod:`workbench.compute.train`), applied multiplicatively.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.compute.devices import DeviceSpec
from workbench.compute.graph import COMPUTE_KINDS, OPTIMIZER_STATE_COPIES, Graph
from workbench.perf import overlap_time

KERNEL_KINDS: tuple[str, ...] = ("conv", "gemm", "rnn")
N_KERNEL_FEATURES = 6
TRAIN_PASSES = 3
"""A training step runs each operation's cost three times: forward, backward with respect
to the inputs, backward with respect to the weights."""

COEFFICIENTS_SCHEMA_VERSION = 1


def roofline_time_s(flops: float, bytes_: float, device: DeviceSpec,
                    precision: str = "fp32") -> float:
    """Lower bound ``max(F / P, B / W)`` on a kernel's time, s."""
    return max(flops / (device.peak_tflops(precision) * 1e12),
               bytes_ / (device.mem_bw_gb_s * 1e9))


def kernel_features(flops: float, bytes_: float, kernels: float, device: DeviceSpec,
                    precision: str = "fp32") -> np.ndarray:
    """Feature vector ``[1, f, f^2, a, p, amd]`` of the kernel correction (module docstring)."""
    peak = device.peak_tflops(precision)
    f = float(np.clip(math.log10(max(flops / max(kernels, 1.0), 1.0)) - 9.0, -3.0, 3.0))
    ridge = peak * 1e12 / (device.mem_bw_gb_s * 1e9)
    ai = flops / max(bytes_, 1.0)
    a = float(np.clip(math.log10(max(ai, 1e-6) / ridge), -2.0, 2.0))
    p = float(np.clip(math.log10(device.tdp_w / peak) - 1.0, -1.0, 1.0))
    return np.array([1.0, f, f * f, a, p, 1.0 if device.vendor == "amd" else 0.0])


@dataclass(frozen=True)
class SyncModel:
    """Ring all-reduce model: efficiencies of the link, per-hop latency, overlap ``gamma``."""

    intra_efficiency: float = 0.5
    inter_efficiency: float = 0.2
    latency_s: float = 1e-4
    gamma: float = 1.0


@dataclass(frozen=True)
class Coefficients:
    """Everything the predictor learned; shipped as ``workbench/data/compute/coefficients.json``.

    Attributes
    ----------
    kernel_weights : Mapping[str, tuple[float, ...]]
        Per kernel kind, the weights ``w_kind`` of the log correction (see module docstring).
    kind_scales : Mapping[str, float]
        ``c_kind`` of the graph aggregation for ``conv``, ``gemm``, ``rnn``.
    memory_scale : float
        ``c_m``, the scale of the memory-bound operations' roofline time.
    launch_s : float
        Per-kernel host cost ``l``, s.
    step_overhead_s : float
        Fixed framework cost per step ``t_0``, s.
    sync : SyncModel
    interval_1gpu, interval_multi : tuple of float
        5 % and 95 % quantiles of ``log(true / predicted)`` on held-out devices (1 GPU;
        several GPUs).
    app_offsets : Mapping[str, float]
        Median ``log(true / predicted)`` of each application over its measured devices.
    trained_on : Mapping[str, Any]
        What the coefficients were fitted to (counts and files), for the record.
    """

    kernel_weights: Mapping[str, tuple[float, ...]]
    kind_scales: Mapping[str, float] = field(default_factory=dict)
    memory_scale: float = 1.0
    launch_s: float = 0.0
    step_overhead_s: float = 0.0
    sync: SyncModel = field(default_factory=SyncModel)
    interval_1gpu: tuple[float, float] = (-0.5, 0.5)
    interval_multi: tuple[float, float] = (-0.6, 0.6)
    app_offsets: Mapping[str, float] = field(default_factory=dict)
    trained_on: Mapping[str, Any] = field(default_factory=dict)

    def with_(self, **changes: Any) -> Coefficients:
        """A copy with some fields replaced."""
        from dataclasses import replace

        return replace(self, **changes)


ROOFLINE_ONLY = Coefficients(kernel_weights={k: (0.0,) * N_KERNEL_FEATURES
                                             for k in KERNEL_KINDS})
"""The baseline without learning: pure roofline, no launch or framework cost."""


def coefficients_to_dict(c: Coefficients) -> dict[str, Any]:
    d = asdict(c)
    d["kernel_weights"] = {k: list(v) for k, v in c.kernel_weights.items()}
    d["app_offsets"] = dict(c.app_offsets)
    d["kind_scales"] = dict(c.kind_scales)
    d["trained_on"] = dict(c.trained_on)
    d["schema_version"] = COEFFICIENTS_SCHEMA_VERSION
    return d


def coefficients_from_dict(d: Mapping[str, Any]) -> Coefficients:
    if d.get("schema_version") != COEFFICIENTS_SCHEMA_VERSION:
        raise ValueError(f"coefficients have schema_version {d.get('schema_version')!r}; "
                         f"retrain with `workbench predict train`")
    return Coefficients(
        kernel_weights={k: tuple(float(x) for x in v) for k, v in d["kernel_weights"].items()},
        kind_scales={k: float(v) for k, v in d["kind_scales"].items()},
        memory_scale=float(d["memory_scale"]),
        launch_s=float(d["launch_s"]), step_overhead_s=float(d["step_overhead_s"]),
        sync=SyncModel(**{k: float(v) for k, v in d["sync"].items()}),
        interval_1gpu=(float(d["interval_1gpu"][0]), float(d["interval_1gpu"][1])),
        interval_multi=(float(d["interval_multi"][0]), float(d["interval_multi"][1])),
        app_offsets={k: float(v) for k, v in d.get("app_offsets", {}).items()},
        trained_on=dict(d.get("trained_on", {})),
    )


def coefficients_path() -> Path:
    """Path of the shipped coefficients."""
    return Path(__file__).resolve().parent.parent / "data" / "compute" / "coefficients.json"


def load_coefficients(path: Path | str | None = None) -> Coefficients:
    """The shipped (or another file's) fitted coefficients."""
    p = Path(path) if path is not None else coefficients_path()
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found; train with `workbench predict train "
                                "--data ../shared/data/profiles`")
    return coefficients_from_dict(json.loads(p.read_text()))


def write_coefficients(c: Coefficients, path: Path | str) -> None:
    """Write the coefficients JSON atomically (an interrupted write keeps the old file)."""
    from workbench.io.plan_csv import atomic_write

    with atomic_write(path) as fh:
        fh.write(json.dumps(coefficients_to_dict(c), indent=1) + "\n")


# --------------------------------------------------------------------------- compute


def kernel_time_s(kind: str, flops: float, bytes_: float, kernels: float, device: DeviceSpec,
                  coef: Coefficients, precision: str = "fp32") -> float:
    """Corrected time of a compute kernel (or group of ``kernels`` launches), s:
    ``t_roof * exp(w_kind . features)``."""
    t = roofline_time_s(flops, bytes_, device, precision)
    w = coef.kernel_weights.get(kind)
    if w is None:
        return t
    return t * math.exp(float(np.dot(w, kernel_features(flops, bytes_, kernels, device,
                                                        precision))))


@dataclass(frozen=True)
class ComputeBreakdown:
    """Terms of one predicted compute time, s (see module docstring)."""

    compute_kernels_s: float
    memory_ops_s: float
    launch_s: float
    overhead_s: float
    offset_factor: float

    @property
    def total_s(self) -> float:
        return self.offset_factor * (self.compute_kernels_s + self.memory_ops_s
                                     + self.launch_s + self.overhead_s)


def compute_breakdown(graph: Graph, device: DeviceSpec, local_batch: float,
                      coef: Coefficients, precision: str = "fp32",
                      app: str | None = None) -> ComputeBreakdown:
    """Per-term compute time of one training step at ``local_batch`` samples per GPU."""
    sums = graph_sums(graph, device, local_batch, coef, precision)
    sc = sum(coef.kind_scales.get(k, 1.0) * sums[k] for k in KERNEL_KINDS)
    family = app or str(graph.meta.get("app", graph.name))
    off = math.exp(coef.app_offsets.get(family, 0.0))
    return ComputeBreakdown(sc, coef.memory_scale * sums["memory"],
                            coef.launch_s * sums["kernels"], coef.step_overhead_s, off)


def graph_sums(graph: Graph, device: DeviceSpec, local_batch: float, coef: Coefficients,
               precision: str = "fp32") -> dict[str, float]:
    """The unscaled sums of the aggregation at ``local_batch``: corrected kernel time per
    compute kind (s), memory-op roofline time incl. the optimizer update (s), launches."""
    b = float(local_batch)
    if not b > 0:
        raise ValueError(f"local batch must be positive, got {local_batch!r}")
    out = dict.fromkeys((*KERNEL_KINDS, "memory", "kernels"), 0.0)
    for op in graph.ops:
        f = b * op.flops_per_sample
        by = b * op.act_bytes_per_sample + op.param_bytes
        if op.kind in COMPUTE_KINDS:
            out[op.kind] += TRAIN_PASSES * kernel_time_s(op.kind, f, by, op.kernels, device,
                                                         coef, precision)
        else:
            out["memory"] += TRAIN_PASSES * roofline_time_s(f, by, device, precision)
        out["kernels"] += TRAIN_PASSES * op.kernels
    out["memory"] += (OPTIMIZER_STATE_COPIES[graph.optimizer] * graph.param_bytes
                      / (device.mem_bw_gb_s * 1e9))
    out["kernels"] += 2 * len(graph.ops)  # optimizer: about one update per parameter tensor
    return out


def compute_time_s(graph: Graph, device: DeviceSpec, local_batch: float, coef: Coefficients,
                   precision: str = "fp32", app: str | None = None) -> float:
    """Predicted compute time ``T_comp`` of one step, s (module docstring, layer 3)."""
    return compute_breakdown(graph, device, local_batch, coef, precision, app).total_s


# --------------------------------------------------------------------------- sync


def link_gb_s(device: DeviceSpec, nodes: int, inter_node_gbit_s: float | None = None) -> float:
    """Bandwidth the ring gets per GPU and direction, GB/s: the intra-node link on one node,
    else the slower of it and the server's network (``Gbit/s / 8``)."""
    if nodes <= 1:
        return device.intra_node_gb_s
    net = (inter_node_gbit_s if inter_node_gbit_s is not None else device.inter_node_gbit_s)
    return min(device.intra_node_gb_s, net / 8.0)


def sync_time_s(gradient_bytes: float, gpus: int, nodes: int, device: DeviceSpec,
                sync: SyncModel, inter_node_gbit_s: float | None = None) -> float:
    """Ring all-reduce time ``2 (n-1)/n G / (eta B) + 2 (n-1) lambda`` (0 on one GPU), s."""
    n = int(gpus)
    if n <= 1:
        return 0.0
    eta = sync.intra_efficiency if nodes <= 1 else sync.inter_efficiency
    bw = link_gb_s(device, nodes, inter_node_gbit_s) * 1e9 * eta
    return 2.0 * (n - 1) / n * gradient_bytes / bw + 2.0 * (n - 1) * sync.latency_s


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class StepPrediction:
    """One predicted configuration: ``gpus`` GPUs on ``nodes`` servers, ``local_batch`` per GPU.

    ``step_time_s`` is the central prediction, ``step_time_lo_s``/``step_time_hi_s`` its
    5-95 % prediction interval, ``compute_s`` and ``sync_s`` Pollux's split.
    """

    gpus: int
    local_batch: int
    step_time_s: float
    step_time_lo_s: float
    step_time_hi_s: float
    compute_s: float
    sync_s: float
    nodes: int = 1

    def row(self) -> dict[str, float | int]:
        """The JSON row of ``workbench predict --json``."""
        return {"gpus": self.gpus, "local_batch": self.local_batch,
                "step_time_s": self.step_time_s, "step_time_lo_s": self.step_time_lo_s,
                "step_time_hi_s": self.step_time_hi_s, "compute_s": self.compute_s,
                "sync_s": self.sync_s}


def predict_step(graph: Graph, device: DeviceSpec, gpus: int, local_batch: int,
                 coef: Coefficients, nodes: int = 1, precision: str = "fp32",
                 inter_node_gbit_s: float | None = None, app: str | None = None,
                 calibration: float = 1.0) -> StepPrediction:
    """Predicted step time of ``graph`` on ``gpus`` x ``device`` over ``nodes`` servers.

    ``calibration`` multiplies the compute time (1: none), e.g. measured / predicted at one
    measured configuration (:func:`workbench.compute.measure.calibration_from_store`).
    """
    if gpus < 1 or nodes < 1 or nodes > gpus:
        raise ValueError(f"need 1 <= nodes <= gpus, got gpus={gpus}, nodes={nodes}")
    if local_batch < 1:
        raise ValueError(f"local batch must be >= 1, got {local_batch}")
    t_c = calibration * compute_time_s(graph, device, local_batch, coef, precision, app)
    t_s = sync_time_s(graph.param_bytes, gpus, nodes, device, coef.sync, inter_node_gbit_s)
    t = float(overlap_time(t_c, t_s, coef.sync.gamma))
    lo, hi = coef.interval_1gpu if gpus == 1 else coef.interval_multi
    return StepPrediction(gpus=int(gpus), local_batch=int(local_batch), step_time_s=t,
                          step_time_lo_s=t * math.exp(lo), step_time_hi_s=t * math.exp(hi),
                          compute_s=t_c, sync_s=t_s, nodes=int(nodes))


def predict_grid(graph: Graph, device: DeviceSpec, gpus: Sequence[int],
                 local_batches: Sequence[int], coef: Coefficients, nodes: int = 1,
                 **kwargs: Any) -> list[StepPrediction]:
    """One :class:`StepPrediction` per combination of ``gpus`` and ``local_batches``."""
    return [predict_step(graph, device, n, b, coef, nodes=nodes, **kwargs)
            for n in gpus for b in local_batches]


def interval_factors(coef: Coefficients, multi_gpu: bool = False) -> tuple[float, float]:
    """``(lo, hi)`` multiplicative factors of the prediction interval on step time."""
    lo, hi = coef.interval_multi if multi_gpu else coef.interval_1gpu
    return math.exp(lo), math.exp(hi)
