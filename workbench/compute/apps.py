"""The Pollux apps' step time through one entry point, by the predictor that is more
accurate on held-out devices.

Two predictors can time an app's training step (:func:`predict_app_step`):

* ``"graph"``: the graph-aggregated model of :mod:`workbench.compute.predict` (a learned
  DeepBench correction per compute kind, scales, a launch and a per-step framework cost
  fitted on the apps' own step times);
* ``"kernel"``: the kernel-level model that times transformer jobs
  (:mod:`workbench.compute.kernels`, trained on NeuSight's kernels; the timer cost and
  launch floor of :mod:`workbench.compute.step`), on the app's kernels
  (:func:`app_step_graph`)::

      T_comp = sum_k count_k max(t_k - delta_kind, t_roof,k, l)     forward + backward + update

  with each operation's shape (:attr:`workbench.compute.graph.Op.dims`) at the local batch:
  a convolution runs its forward, its input gradient (not for the first layer) and its
  weight gradient as three kernels of the same shape, except that a 1x1 convolution is the
  GEMM it is (output pixels x ``C_in`` x ``C_out``: NeuSight measured only 3x3 stride-1
  convolutions, whose learned slowdown is relative to the Winograd bound, a quarter of the
  direct FLOPs); a layer with weights runs the three GEMMs of a linear layer (the builder
  of :mod:`workbench.compute.opgraph`, as for transformers); the update one element-wise
  kernel per weight tensor (``OPTIMIZER_STATE_COPIES`` numbers per parameter). There is no
  per-step framework cost: the kernel model has none (the graph model fits one).

Both take the sync of the graph model (a ring all-reduce of the FP32 gradient fitted on the
Pollux multi-GPU rows) and its overlap ``T_step = (T_comp^g + T_sync^g)^(1/g)``, so that on
several GPUs they differ only in the compute. An app whose graph has an operation the
kernel model has no kind for (DeepSpeech2's LSTMs: NeuSight measured no recurrent kernel) or
no shape for cannot go through it (:func:`kernel_unrepresentable`).

Which predictor serves each app is data, ``workbench/data/compute/app_predictors.json``,
written by ``bench/pollux_predictors.py --write`` from both predictors' leave-one-device-out
errors on the apps' measured step times (Zeus on four GPUs, Pollux on the T4): an app goes
through the kernel model only where its held-out median error there is lower on one GPU
and not higher on several (the T4 rows). The file keeps the measured figures beside the
choice. A graph that is not an app of the file (an ONNX import) takes the graph model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.compute.devices import DeviceSpec
from workbench.compute.graph import OPTIMIZER_STATE_COPIES, Graph, Op
from workbench.compute.kernels import KernelModel, flops_bytes, read_kernel_model
from workbench.compute.opgraph import KernelBuilder, StepGraph, merge_kernels
from workbench.compute.predict import (
    Coefficients,
    StepPrediction,
    predict_step,
    sync_time_s,
)
from workbench.compute.step import StepTerms, kernel_times, read_step_terms
from workbench.perf import overlap_time

PREDICTORS: tuple[str, ...] = ("graph", "kernel")
APP_PREDICTORS_SCHEMA_VERSION = 1
FP32_BYTES = 4

_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "hardtanh": "relu"}


class AppKernelError(ValueError):
    """The app's graph cannot go through the kernel model; the message says why."""


@dataclass(frozen=True)
class AppChoice:
    """The predictor of one app and why (``workbench/data/compute/app_predictors.json``).

    Attributes
    ----------
    predictor : {"graph", "kernel"}
    reason : str
        The measured comparison (or why the kernel model cannot represent the app).
    interval_1gpu, interval_multi : tuple of float, optional
        5 % and 95 % quantiles of ``log(true / predicted)`` of the kernel model on held-out
        devices, pooled over the apps it serves, where those rows span at least three
        devices; None otherwise, and the graph model's range (its coefficients') is used.
    errors : Mapping[str, Any]
        Held-out median and max APE of both predictors by configuration class.
    """

    app: str
    predictor: str
    reason: str = ""
    interval_1gpu: tuple[float, float] | None = None
    interval_multi: tuple[float, float] | None = None
    errors: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.predictor not in PREDICTORS:
            raise ValueError(f"app {self.app!r}: predictor {self.predictor!r} is not one of "
                             f"{PREDICTORS}")


def app_predictors_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "compute" / "app_predictors.json"


def read_app_predictors(path: Path | str | None = None) -> dict[str, AppChoice]:
    """The shipped per-app choice (empty where the file is absent: every app on the graph
    model)."""
    p = Path(path) if path is not None else app_predictors_path()
    if not p.is_file():
        return {}
    d = json.loads(p.read_text())
    if d.get("schema_version") != APP_PREDICTORS_SCHEMA_VERSION:
        raise ValueError(f"{p}: schema_version {d.get('schema_version')!r}; rerun "
                         "`python bench/pollux_predictors.py --write`")

    def pair(v: Any) -> tuple[float, float] | None:
        return None if v is None else (float(v[0]), float(v[1]))

    return {a: AppChoice(a, str(c["predictor"]), str(c.get("reason", "")),
                         pair(c.get("interval_1gpu")), pair(c.get("interval_multi")),
                         dict(c.get("errors", {})))
            for a, c in d["apps"].items()}


def write_app_predictors(choices: Mapping[str, AppChoice], path: Path | str,
                         source: str = "") -> None:
    """Write the choice table as JSON atomically."""
    from workbench.io.plan_csv import atomic_write

    doc = {"schema_version": APP_PREDICTORS_SCHEMA_VERSION, "source": source,
           "apps": {a: {"predictor": c.predictor, "reason": c.reason,
                        "interval_1gpu": c.interval_1gpu, "interval_multi": c.interval_multi,
                        "errors": dict(c.errors)} for a, c in sorted(choices.items())}}
    with atomic_write(path) as fh:
        fh.write(json.dumps(doc, indent=1) + "\n")


# --------------------------------------------------------------------------- app kernels


def kernel_unrepresentable(graph: Graph) -> str | None:
    """Why ``graph`` cannot go through the kernel model, or None when it can."""
    rnn = [op.name for op in graph.ops if op.kind == "rnn"]
    if rnn:
        return (f"recurrent layers ({', '.join(rnn[:3])}{', ...' if len(rnn) > 3 else ''}): "
                "the kernel model has no recurrent kernel (NeuSight measured none)")
    bare = [op.name for op in graph.ops if not op.dims]
    if bare:
        return (f"no kernel shapes for {', '.join(bare[:3])}"
                f"{', ...' if len(bare) > 3 else ''} (Op.dims)")
    return None


def _ew_op(op: Op, n_in: int) -> str:
    """The builder's element-wise op for an app operation (its gradient kernels follow)."""
    last = op.name.rsplit(".", 1)[-1]
    for key, act in _ACTIVATIONS.items():
        if key in last:
            return act
    if n_in >= 2:
        return "add"  # residual sums and masks: the gradient passes through
    if "drop" in last or "scale" in last:
        return "mulu"
    if last.endswith("_t"):
        return "copy"  # head split/merge: a contiguous copy
    return "unary"


def _add_op(b: KernelBuilder, op: Op, batch: int, first: bool) -> None:
    d = op.dims
    if op.kind == "conv" and d[2] == 1:  # 1x1: a GEMM over the (strided) output pixels
        pixels = (d[3] - 1) // d[4] + 1
        b.linear(op.name, batch * pixels * pixels, d[0], d[1], bias=False)
    elif op.kind == "conv":
        dims = np.array([[batch, *d]], dtype=np.int64)
        f, by = flops_bytes("conv", dims)
        passes = ("forward", "dW") if first else ("forward", "dX", "dW")
        for part in passes:
            b.emit(op.name if part == "forward" else f"{op.name}.{part}", "conv",
                   "forward" if part == "forward" else "backward", (batch, *d), float(f[0]),
                   float(by[0]))
    elif op.kind == "gemm" and len(d) == 3:
        rows, k, n = d
        b.linear(op.name, batch * rows, k, n, bias=op.param_bytes > FP32_BYTES * k * n)
    elif op.kind == "gemm":
        products, m, n, k = d
        b.bmm(op.name, batch * products, m, n, k)
    elif op.kind == "norm":
        b.norm(op.name, batch * d[0], d[1])
    elif op.kind == "softmax":
        b.softmax(op.name, batch * d[0], d[1])
    elif op.kind == "embedding":
        b.embedding(op.name, batch * d[0], d[1], d[2])
    else:  # element-wise, pooling, reductions: memory-bound over their elements
        n_el = batch * d[0]
        n_in = max(1, round(op.act_bytes_per_sample / (FP32_BYTES * max(d[0], 1))) - 1)
        b.ew(op.name, _ew_op(op, n_in), n_el, min(n_in, 2))


def app_step_graph(graph: Graph, local_batch: int) -> StepGraph:
    """The kernels of one FP32 training step of ``graph`` at ``local_batch`` samples per GPU
    (module docstring); :class:`AppKernelError` where :func:`kernel_unrepresentable`."""
    why = kernel_unrepresentable(graph)
    if why:
        raise AppKernelError(f"{graph.name}: {why}")
    if local_batch < 1:
        raise ValueError(f"local batch must be >= 1, got {local_batch}")
    b = KernelBuilder(FP32_BYTES, train=True, accumulate_grads=False, tp=1)
    for i, op in enumerate(graph.ops):
        _add_op(b, op, int(local_batch), first=(i == 0 or not op.inputs))
    copies = OPTIMIZER_STATE_COPIES[graph.optimizer]
    for op in graph.ops:  # the update: one kernel per weight tensor (PyTorch's for-loop)
        n = op.param_bytes / FP32_BYTES
        if n >= 1:
            b.emit(f"{op.name}.update", "elementwise", "optimizer", (int(n),), 3.0 * n,
                   copies * FP32_BYTES * n, graph.optimizer)
    params = graph.param_bytes / FP32_BYTES
    return StepGraph(graph.name, "train", 1, int(local_batch), "fp32", 1,
                     tuple(merge_kernels(b.out)), {"total": params, "local": params})


def kernel_compute_s(graph: Graph, dev: DeviceSpec, local_batch: int, model: KernelModel,
                     terms: StepTerms) -> float:
    """``T_comp`` of the kernel path: forward, backward and update, s."""
    t = kernel_times(app_step_graph(graph, local_batch), dev, model)
    return float(sum(t.phase_s(terms, p) for p in ("forward", "backward", "optimizer")))


# --------------------------------------------------------------------------- entry point


def app_of(graph: Graph) -> str:
    return str(graph.meta.get("app", graph.name))


def chosen_predictor(graph: Graph, choices: Mapping[str, AppChoice] | None = None) -> str:
    """``"kernel"`` where the table chose it for the graph's app and the graph can go
    through it, else ``"graph"``."""
    c = (choices if choices is not None else read_app_predictors()).get(app_of(graph))
    if c is None or c.predictor != "kernel" or kernel_unrepresentable(graph):
        return "graph"
    return "kernel"


@dataclass(frozen=True)
class KernelPath:
    """What the kernel path reads: the kernel model and the step terms (shipped ones by
    default; held-out ones in validation)."""

    model: KernelModel
    terms: StepTerms

    @classmethod
    def shipped(cls) -> KernelPath:
        return cls(read_kernel_model(), read_step_terms())


def predict_app_step(graph: Graph, device: DeviceSpec, gpus: int, local_batch: int,
                     coef: Coefficients, nodes: int = 1, *, predictor: str | None = None,
                     kernel_path: KernelPath | None = None,
                     choices: Mapping[str, AppChoice] | None = None,
                     inter_node_gbit_s: float | None = None,
                     calibration: float = 1.0, precision: str = "fp32") -> StepPrediction:
    """Predicted step of ``graph`` on ``gpus`` x ``device`` over ``nodes`` servers by the
    app's predictor (``predictor`` forces one): the one entry point of the apps' profiles,
    ``workbench predict --app`` and the validation.

    ``calibration`` multiplies the compute time (one measurement on the device); the
    interval is the chosen predictor's held-out range. The kernel path is FP32 (every
    measurement behind it is); another ``precision`` takes the graph model unless
    ``predictor`` forces the kernel path, which then refuses it.
    """
    ch = choices if choices is not None else read_app_predictors()
    which = predictor or (chosen_predictor(graph, ch) if precision == "fp32" else "graph")
    if which not in PREDICTORS:
        raise ValueError(f"predictor {which!r}: use one of {', '.join(PREDICTORS)}")
    if which == "graph":
        return predict_step(graph, device, gpus, local_batch, coef, nodes=nodes,
                            precision=precision, inter_node_gbit_s=inter_node_gbit_s,
                            calibration=calibration)
    if precision != "fp32":
        raise ValueError(f"the kernel path of the apps is FP32 only, not {precision}")
    if gpus < 1 or nodes < 1 or nodes > gpus:
        raise ValueError(f"need 1 <= nodes <= gpus, got gpus={gpus}, nodes={nodes}")
    kp = kernel_path or KernelPath.shipped()
    t_c = calibration * kernel_compute_s(graph, device, local_batch, kp.model, kp.terms)
    t_s = sync_time_s(graph.param_bytes, gpus, nodes, device, coef.sync, inter_node_gbit_s)
    t = float(overlap_time(t_c, t_s, coef.sync.gamma))
    c = ch.get(app_of(graph))
    i1 = (c.interval_1gpu if c and c.interval_1gpu else coef.interval_1gpu)
    im = (c.interval_multi if c and c.interval_multi else coef.interval_multi)
    lo, hi = i1 if gpus == 1 else im
    return StepPrediction(gpus=int(gpus), local_batch=int(local_batch), step_time_s=t,
                          step_time_lo_s=t * math.exp(lo), step_time_hi_s=t * math.exp(hi),
                          compute_s=t_c, sync_s=t_s, nodes=int(nodes))

