"""From kernels to a step: a transformer's step time on one or several GPUs of one node.

Per phase (forward, backward, optimizer) the kernels of the step graph
(:mod:`workbench.compute.opgraph`) are summed, each at its kernel-level prediction
(:mod:`workbench.compute.kernels`) with two launch terms::

    t'_k = max(t_k - delta_kind, t_roof,k, l)        T_phase = sum_k count_k t'_k

``t_k`` was learned on kernels timed one at a time, each carrying the timer's fixed cost;
in a step the kernels run back to back, so that cost is removed again: ``delta_kind`` is
the shortest measured kernel of the kind (median over the training devices) less an empty
kernel's own launch, :data:`GPU_LAUNCH_S` (both from the kernel measurements, not from step
times). ``l`` is the host's cost of issuing one kernel that a fast GPU waits for (PyTorch
eager dispatch), the one term fitted to measured step times (of the other devices, in leave
one device out; :mod:`workbench.compute.step_train`).

Several GPUs on one node (``N`` GPUs, link bandwidth ``B`` per GPU and direction, link
efficiency ``eta`` and per-hop latency ``lambda`` as fitted on the Pollux apps,
:class:`workbench.compute.predict.SyncModel`):

* **data parallel** (``dp``): each GPU runs the local batch; the gradient (``G`` bytes) is
  ring-all-reduced, ``T_sync = 2 (N-1)/N G / (eta B) + 2 (N-1) lambda``, overlapping the
  backward pass as Pollux's ``T = (T_bw^g + T_sync^g)^(1/g)``;
* **tensor parallel** (``tp``): the graph is split ``N`` ways (Megatron-LM), and each of its
  activation all-reduces (``s b h`` elements, two per layer and direction) costs the same ring
  formula on the critical path;
* **pipeline parallel** (``pp``, GPipe schedule): the layers split into ``N`` stages, the
  batch into ``m`` micro-batches; ``T = (m + N - 1) / m * T_stage`` with ``T_stage`` the
  stage's share of the step (Huang et al., GPipe, NeurIPS 2019: the bubble fraction is
  ``(N - 1) / (m + N - 1)``), plus the activations sent between stages.

The prediction interval multiplies the step by the 5-95 % range of ``log(true / predicted)``
over held-out devices (training and inference apart; BF16 widened, see :data:`StepTerms`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.compute.devices import DeviceSpec
from workbench.compute.kernels import KernelModel
from workbench.compute.opgraph import PHASES, StepGraph, build_step_graph
from workbench.compute.predict import SyncModel, sync_time_s
from workbench.compute.transformer import DTYPE_BYTES, ModelSpec, step_memory_bytes
from workbench.perf import overlap_time

PARALLEL = ("dp", "tp", "pp")
GPU_LAUNCH_S = 3e-6
"""GPU-side time of an empty kernel launched back to back, s (3-5 us on NVIDIA GPUs of the
Pascal to Hopper generations; an assumption, the lower end)."""
STEP_TERMS_SCHEMA_VERSION = 1


class DeviceMemoryError(ValueError):
    """The configuration does not fit in the device's memory; the message says what fits."""


@dataclass(frozen=True)
class StepTerms:
    """The learned aggregation terms and the intervals (``workbench/data/compute/
    step_terms.json``).

    Attributes
    ----------
    delta_s : Mapping[str, float]
        Per kernel kind, the timer cost removed when kernels run back to back, s.
    launch_s : float
        Host launch cost per kernel that a step cannot go below, s.
    interval_train, interval_inference : tuple of float
        5 % and 95 % quantiles of ``log(true / predicted)`` on held-out devices.
    bf16_widening : float
        Factor on the interval's log bounds in BF16 (the kernels were measured in FP32).
    sync : SyncModel
        Ring all-reduce efficiency, latency and overlap (the Pollux apps' fit).
    """

    delta_s: Mapping[str, float] = field(default_factory=dict)
    launch_s: float = 0.0
    interval_train: tuple[float, float] = (-0.3, 0.3)
    interval_inference: tuple[float, float] = (-0.3, 0.3)
    bf16_widening: float = 2.0
    sync: SyncModel = field(default_factory=SyncModel)
    trained_on: Mapping[str, Any] = field(default_factory=dict)

    def interval(self, mode: str, precision: str) -> tuple[float, float]:
        lo, hi = self.interval_train if mode == "train" else self.interval_inference
        w = self.bf16_widening if precision == "bf16" else 1.0
        return lo * w, hi * w


def step_terms_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "compute" / "step_terms.json"


def write_step_terms(t: StepTerms, path: Path | str) -> None:
    """Write the terms as JSON atomically."""
    from workbench.io.plan_csv import atomic_write

    d = asdict(t)
    d["schema_version"] = STEP_TERMS_SCHEMA_VERSION
    d["delta_s"] = dict(t.delta_s)
    d["trained_on"] = dict(t.trained_on)
    with atomic_write(path) as fh:
        fh.write(json.dumps(d, indent=1) + "\n")


def read_step_terms(path: Path | str | None = None) -> StepTerms:
    """The shipped (or another file's) aggregation terms."""
    p = Path(path) if path is not None else step_terms_path()
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found; train with `workbench compute train`")
    d = json.loads(p.read_text())
    if d.get("schema_version") != STEP_TERMS_SCHEMA_VERSION:
        raise ValueError(f"{p}: schema_version {d.get('schema_version')!r}; retrain")
    return StepTerms(
        delta_s={k: float(v) for k, v in d["delta_s"].items()}, launch_s=float(d["launch_s"]),
        interval_train=(float(d["interval_train"][0]), float(d["interval_train"][1])),
        interval_inference=(float(d["interval_inference"][0]),
                            float(d["interval_inference"][1])),
        bf16_widening=float(d["bf16_widening"]),
        sync=SyncModel(**{k: float(v) for k, v in d["sync"].items()}),
        trained_on=dict(d.get("trained_on", {})))


# --------------------------------------------------------------------------- kernels


@dataclass(frozen=True)
class KernelTimes:
    """Per-kernel predictions of one graph on one device, in the graph's order."""

    predicted_s: np.ndarray
    roofline_s: np.ndarray
    counts: np.ndarray
    phases: np.ndarray
    kinds: np.ndarray

    def phase_s(self, terms: StepTerms, phase: str | None = None) -> float:
        """``sum count * max(t - delta_kind, t_roof, l)`` over one phase (or all), s."""
        delta = np.array([terms.delta_s.get(str(k), 0.0) for k in self.kinds])
        t = np.maximum(np.maximum(self.predicted_s - delta, self.roofline_s), terms.launch_s)
        sel = np.ones(len(t), bool) if phase is None else self.phases == phase
        return float(np.sum(self.counts[sel] * t[sel]))


def kernel_times(g: StepGraph, dev: DeviceSpec, model: KernelModel) -> KernelTimes:
    """Every kernel of ``g`` predicted on ``dev`` (one vectorised call per kind)."""
    n = len(g.kernels)
    pred, roof = np.zeros(n), np.zeros(n)
    by_kind: dict[str, list[int]] = {}
    for i, k in enumerate(g.kernels):
        by_kind.setdefault(k.kind, []).append(i)
    for kind, idx in by_kind.items():
        ks = [g.kernels[i] for i in idx]
        dims = np.zeros((len(ks), 7), dtype=np.int64)
        for j, k in enumerate(ks):
            dims[j, :len(k.dims)] = k.dims
        p, r = model.predict_s(kind, dims, np.array([k.flops for k in ks]),
                               np.array([k.bytes for k in ks]), [k.op for k in ks], dev,
                               g.precision)
        pred[idx], roof[idx] = p, r
    return KernelTimes(pred, roof, np.array([k.count for k in g.kernels], dtype=float),
                       np.array([k.phase for k in g.kernels]),
                       np.array([k.kind for k in g.kernels]))


# --------------------------------------------------------------------------- a step


@dataclass(frozen=True)
class TransformerStep:
    """A predicted step (seconds) of one configuration; the fields of ``predict --json``.

    ``step_time_s = forward_s + overlap(backward_s, dp sync) + optimizer_s + tp sync``
    (``sync_s`` is the all-reduce time before overlap), scaled by the pipeline bubble.
    """

    model: str
    device: str
    mode: str
    seq_len: int
    batch: int
    precision: str
    gpus: int
    parallel: str
    step_time_s: float
    step_time_lo_s: float
    step_time_hi_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    sync_s: float
    roofline_s: float
    memory_gb: float
    kernels: int
    params: float

    def row(self) -> dict[str, Any]:
        """The JSON object of ``workbench predict --model-config ... --json``."""
        d = asdict(self)
        d["tokens_per_s"] = self.seq_len * self.batch * (
            self.gpus if self.parallel == "dp" else 1) / self.step_time_s
        return d


def ring_allreduce_s(nbytes: float, n: int, dev: DeviceSpec, sync: SyncModel) -> float:
    """One ring all-reduce over ``n`` GPUs of one node (:func:`workbench.compute.predict.
    sync_time_s`)."""
    return sync_time_s(nbytes, n, 1, dev, sync)


def assemble_step(g: StepGraph, dev: DeviceSpec, times: KernelTimes, terms: StepTerms,
                  gpus: int = 1, parallel: str = "dp", memory_gb: float = 0.0,
                  nodes: int = 1) -> TransformerStep:
    """Phases, data- or tensor-parallel synchronisation and interval of one configuration
    whose graph ``g`` is one GPU's (module docstring); data parallelism may span ``nodes``
    servers (the ring then runs at the slower of the node's link and its network share)."""
    fw, bw, opt = (times.phase_s(terms, p) for p in PHASES)
    sync = 0.0
    if gpus > 1 and parallel == "dp" and g.mode == "train":
        sync = sync_time_s(g.gradient_bytes, gpus, nodes, dev, terms.sync)
    bw_sync = float(overlap_time(bw, sync, terms.sync.gamma)) if sync > 0 else bw
    tp_sync = 0.0
    if parallel == "tp" and gpus > 1:
        tp_sync = sum(c * ring_allreduce_s(b, gpus, dev, terms.sync)
                      for b, c in g.tp_allreduces)
    step = fw + bw_sync + opt + tp_sync
    return _step(g, dev, terms, gpus, parallel, step, fw, bw, opt, sync + tp_sync, times,
                 memory_gb)


def _step(g: StepGraph, dev: DeviceSpec, terms: StepTerms, gpus: int, parallel: str,
          step: float, fw: float, bw: float, opt: float, sync: float, times: KernelTimes,
          memory_gb: float, batch: int | None = None, roof_scale: float = 1.0
          ) -> TransformerStep:
    lo, hi = terms.interval(g.mode, g.precision)
    return TransformerStep(
        model=g.model, device=dev.name, mode=g.mode, seq_len=g.seq_len,
        batch=g.batch if batch is None else batch, precision=g.precision, gpus=gpus,
        parallel=parallel, step_time_s=step, step_time_lo_s=step * math.exp(lo),
        step_time_hi_s=step * math.exp(hi), forward_s=fw, backward_s=bw, optimizer_s=opt,
        sync_s=sync, roofline_s=roof_scale * float(np.sum(times.counts * times.roofline_s)),
        memory_gb=memory_gb, kernels=int(np.sum(times.counts)),
        params=float(g.params.get("total", 0.0)))


def pipeline_step(g_micro: StepGraph, dev: DeviceSpec, times: KernelTimes, terms: StepTerms,
                  stages: int, micro_batches: int, memory_gb: float = 0.0
                  ) -> TransformerStep:
    """GPipe over ``stages`` GPUs: ``g_micro`` is the whole model at one micro-batch;
    each stage runs ``1 / stages`` of it ``m`` times, the pipeline fills and drains
    (``m + stages - 1`` slots), and each slot boundary sends ``s b h`` activations forward
    (and their gradient back in training)."""
    fw, bw, opt = (times.phase_s(terms, p) for p in PHASES)
    m = micro_batches
    slot = (fw + bw) / stages
    act = g_micro.batch * g_micro.seq_len * g_micro.hidden * DTYPE_BYTES[g_micro.precision]
    send = act * (2 if g_micro.mode == "train" else 1) / (
        dev.intra_node_gb_s * 1e9 * terms.sync.intra_efficiency) + terms.sync.latency_s
    step = (m + stages - 1) * (slot + send) + opt / stages
    return _step(g_micro, dev, terms, stages, "pp", step, m * fw / stages, m * bw / stages,
                 opt / stages, (m + stages - 1) * send, times, memory_gb,
                 batch=g_micro.batch * m, roof_scale=m / stages)


def predict_transformer(spec: ModelSpec, mode: str, seq_len: int, batch: int,
                        dev: DeviceSpec, model: KernelModel, terms: StepTerms,
                        gpus: int = 1, parallel: str = "dp", precision: str = "fp32",
                        head: str | None = None, micro_batches: int = 0,
                        accumulate_grads: bool = False, nodes: int = 1) -> TransformerStep:
    """Predicted step of ``spec`` at ``batch`` sequences per GPU (data parallel) or per
    replica (tensor and pipeline parallel) on ``gpus`` x ``dev`` of one node.

    Raises :class:`DeviceMemoryError` when one GPU's share does not fit in the device's
    memory (:func:`workbench.compute.transformer.step_memory_bytes`), ``ValueError`` for a
    bad mode, precision, parallelism or a GPU count that exceeds the node.
    """
    if parallel not in PARALLEL:
        raise ValueError(f"parallel {parallel!r}: use one of {', '.join(PARALLEL)}")
    if gpus < 1 or gpus > dev.gpus_per_node * nodes or (parallel != "dp" and nodes > 1):
        raise ValueError(f"--gpus {gpus}: one node of {dev.name} holds 1..{dev.gpus_per_node} "
                         "GPUs (across nodes only data parallelism is modelled)")
    if precision == "bf16":
        dev.peak_tflops("bf16")  # raises on a device without BF16
    tp = gpus if parallel == "tp" else 1
    stages = gpus if parallel == "pp" else 1
    if stages > 1:
        m = micro_batches or min(batch, 4 * stages)
        if batch % m:
            raise ValueError(f"--batch {batch} does not split into {m} micro-batches; give a "
                             "multiple")
        g = build_step_graph(spec, mode, seq_len, batch // m, precision, 1, head,
                             accumulate_grads)
    else:
        g = build_step_graph(spec, mode, seq_len, batch, precision, tp, head,
                             accumulate_grads)
    params = g.params["total"]
    need = step_memory_bytes(spec, mode, seq_len, batch if stages == 1 else batch // m,
                             precision, params, tp) / stages
    if need > dev.memory_gb * 1e9:
        fit = _largest_batch(spec, mode, seq_len, precision, params, tp * stages,
                             dev.memory_gb * 1e9)
        hint = (f"use --batch {fit} or less" if fit else
                "the weights alone do not fit: use more GPUs with --parallel tp or pp")
        raise DeviceMemoryError(
            f"{spec.name} {mode} at batch {batch} x {seq_len} tokens needs {need / 1e9:.1f} GB "
            f"per GPU, more than {dev.name}'s {dev.memory_gb:g} GB; {hint}")
    times = kernel_times(g, dev, model)
    if stages > 1:
        return pipeline_step(g, dev, times, terms, stages, m, need / 1e9)
    return assemble_step(g, dev, times, terms, gpus, parallel, need / 1e9, nodes)


def _largest_batch(spec: ModelSpec, mode: str, seq_len: int, precision: str, params: float,
                   split: int, capacity: float) -> int:
    """The largest power-of-two batch whose memory fits ``capacity`` bytes (0: none)."""
    best, b = 0, 1
    while b <= 2**20 and step_memory_bytes(spec, mode, seq_len, b, precision, params,
                                           split) <= capacity:
        best, b = b, 2 * b
    return best
