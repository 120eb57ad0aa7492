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

Several GPUs (``N``; collectives as NCCL runs them over the node's link,
:mod:`workbench.compute.collectives`, fitted on Vidur's measured all-reduce and send/receive
times)::

    T_step = compute + exposed communication + pipeline bubble

* **data parallel** (``dp``): each GPU runs the local batch; the FP32 gradient (``G`` bytes)
  is all-reduced in DDP's 25 MB buckets while the backward pass runs, so only what outlasts
  the backward and the last bucket are exposed:
  ``max(T_ar(G) - T_ar(bucket) - T_bw, 0) + T_ar(bucket)``. ZeRO stage 3 gathers the
  weights again (an all-gather of ``G``), hidden behind the forward pass where it can be;
  ZeRO >= 1 splits the optimizer step ``N`` ways. Across servers the ring runs at the
  slower of the link and the server's network share (fitted on the Pollux apps);
* **tensor parallel** (``tp``, Megatron-LM): the graph is split ``N`` ways and each of its
  activation all-reduces (``s b h`` elements, two per layer forward and two backward; with
  sequence parallelism a reduce-scatter and an all-gather of the same volume) is on the
  critical path; activation checkpointing repeats the forward ones;
* **pipeline parallel** (``pp``, 1F1B): the layers split into ``N`` stages, the batch into
  ``m`` micro-batches (``--micro-batches``); ``T = (m + N - 1) * T_slot + T_opt / N`` with
  ``T_slot`` one stage's forward and backward of one micro-batch plus its activation
  sends; the bubble ``(N - 1) T_slot`` is ``(N - 1) / (m + N - 1)`` of the slots.

Activation checkpointing adds the forward pass of the transformer blocks to the backward
(``recompute_s``).

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

from workbench.compute.collectives import (
    Collectives,
    all_gather_s,
    all_reduce_s,
    send_recv_s,
    shipped_collectives,
)
from workbench.compute.devices import DeviceSpec
from workbench.compute.kernels import KernelModel
from workbench.compute.opgraph import PHASES, StepGraph, build_step_graph
from workbench.compute.predict import SyncModel
from workbench.compute.transformer import (
    DTYPE_BYTES,
    ZERO_STAGES,
    ModelSpec,
    StepMemory,
    check_seq_len,
    step_memory,
)

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
    in_layer: np.ndarray | None = None

    def phase_s(self, terms: StepTerms, phase: str | None = None,
                layers_only: bool = False) -> float:
        """``sum count * max(t - delta_kind, t_roof, l)`` over one phase (or all), s;
        ``layers_only``: the kernels inside transformer blocks only."""
        delta = np.array([terms.delta_s.get(str(k), 0.0) for k in self.kinds])
        t = np.maximum(np.maximum(self.predicted_s - delta, self.roofline_s), terms.launch_s)
        sel = np.ones(len(t), bool) if phase is None else self.phases == phase
        if layers_only:
            sel = sel & (self.in_layer if self.in_layer is not None
                         else np.zeros(len(t), bool))
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
                       np.array([k.kind for k in g.kernels]),
                       np.array([k.layer for k in g.kernels], dtype=bool))


# --------------------------------------------------------------------------- a step

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket (``bucket_cap_mb=25``): the last bucket's
all-reduce starts when the backward pass ends, so it is never hidden."""


@dataclass(frozen=True)
class StepOptions:
    """How a step runs besides its model, shape, devices and parallelism.

    Attributes
    ----------
    zero : int
        ZeRO/FSDP stage over the data-parallel GPUs (0: none; 1 optimizer states, 2 and
        gradients, 3 and weights).
    activation_checkpointing : bool
        Keep only each block's input and recompute the block in the backward pass.
    sequence_parallel : bool
        Megatron's sequence parallelism beside tensor parallelism (norms and dropout split
        over the sequence; the all-reduce becomes a reduce-scatter and an all-gather of the
        same volume).
    micro_batches : int
        Pipeline micro-batches per step (0: ``min(batch, 4 x stages)``).
    zero_over : int
        The data-parallel degree ZeRO shards over when the step itself is tensor parallel
        (replicas of an LLM job; 0: the GPUs of a data-parallel step).
    inter_node_gbit_s : float or None
        Network per server for data parallelism across nodes (None: the device's typical).
    """

    zero: int = 0
    activation_checkpointing: bool = False
    sequence_parallel: bool = False
    micro_batches: int = 0
    zero_over: int = 0
    inter_node_gbit_s: float | None = None

    def flags(self) -> str:
        """The CLI flags that give these options (for messages)."""
        out = [f"--zero {self.zero}"] if self.zero else []
        out += ["--activation-checkpointing"] if self.activation_checkpointing else []
        out += ["--sequence-parallel"] if self.sequence_parallel else []
        return " ".join(out)


@dataclass(frozen=True)
class TransformerStep:
    """A predicted step (seconds) of one configuration; the fields of ``predict --json``.

    ``step_time_s = compute_s + exposed_comm_s + bubble_s``: ``compute_s`` the kernels of
    one GPU (forward, backward with any recomputation, optimizer), ``exposed_comm_s`` the
    communication not hidden behind them, ``bubble_s`` the pipeline's idle slots; ``sync_s``
    is all communication before overlap. ``mfu`` is model FLOPs utilisation: the model's
    FLOPs of the step (``6 N + 12 L h s`` per token in training, ``2 N + 4 L h s`` in
    inference, ``N`` the parameters of matrix products; PaLM, Chowdhery et al. 2022,
    appendix B) over the GPUs' peak at the precision times the step time.
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
    compute_s: float = 0.0
    exposed_comm_s: float = 0.0
    bubble_s: float = 0.0
    recompute_s: float = 0.0
    model_flops: float = 0.0
    mfu: float = 0.0
    micro_batches: int = 1
    zero: int = 0
    activation_checkpointing: bool = False
    sequence_parallel: bool = False
    memory_parts_gb: Mapping[str, float] = field(default_factory=dict)
    nodes: int = 1

    def row(self) -> dict[str, Any]:
        """The JSON object of ``workbench predict --model-config ... --json``."""
        d = asdict(self)
        d["memory_parts_gb"] = dict(self.memory_parts_gb)
        d["tokens_per_s"] = self.seq_len * self.batch * (
            self.gpus if self.parallel == "dp" else 1) / self.step_time_s
        return d


def model_flops(spec: ModelSpec, g: StepGraph, sequences: int) -> float:
    """Model FLOPs of a step over ``sequences`` sequences (:class:`TransformerStep`)."""
    n = float(g.params.get("layers", 0.0)) + float(spec.vocab) * (spec.embed_proj or spec.hidden)
    per_tok = (6.0 * n + 12.0 * spec.total_layers * spec.hidden * g.seq_len
               if g.mode == "train" else 2.0 * n + 4.0 * spec.total_layers * spec.hidden
               * g.seq_len)
    return per_tok * g.seq_len * sequences


def assemble_step(g: StepGraph, dev: DeviceSpec, times: KernelTimes, terms: StepTerms,
                  gpus: int = 1, parallel: str = "dp", memory_gb: float = 0.0,
                  nodes: int = 1, options: StepOptions | None = None,
                  collectives: Collectives | None = None) -> TransformerStep:
    """Phases, data- or tensor-parallel communication and interval of one configuration
    whose graph ``g`` is one GPU's (module docstring); data parallelism may span ``nodes``
    servers (the ring then runs at the slower of the node's link and its network share)."""
    o = options or StepOptions()
    c = collectives or shipped_collectives()
    train = g.mode == "train"
    fw, bw, opt = (times.phase_s(terms, p) for p in PHASES)
    recompute = (times.phase_s(terms, "forward", layers_only=True)
                 if train and o.activation_checkpointing else 0.0)
    tp_comm, dp_comm, exposed = 0.0, 0.0, 0.0
    shards = o.zero_over or (gpus if parallel == "dp" else 1)
    if o.zero and shards > 1 and train:
        opt = opt / shards  # each GPU updates its shard of the optimizer states
    if parallel == "tp" and gpus > 1:
        for nbytes, count in g.tp_allreduces:
            n_calls = count * (1.5 if train and o.activation_checkpointing else 1.0)
            tp_comm += n_calls * all_reduce_s(nbytes, gpus, dev, c)
        exposed += tp_comm  # on the critical path between the blocks' GEMMs
    if parallel == "dp" and gpus > 1 and train:
        grad = g.gradient_bytes
        net = o.inter_node_gbit_s
        reduce = all_reduce_s(grad, gpus, dev, c, nodes, terms.sync, net)
        last = all_reduce_s(min(grad, DDP_BUCKET_BYTES), gpus, dev, c, nodes, terms.sync, net)
        exposed += max(reduce - last - (bw + recompute), 0.0) + last
        dp_comm = reduce
        if o.zero >= 3:  # weights gathered again for the forward (and backward) pass
            gather = all_gather_s(grad, gpus, dev, c, nodes, terms.sync, net)
            exposed += max(gather - fw, 0.0)
            dp_comm += gather
    compute = fw + bw + recompute + opt
    step = compute + exposed
    sequences = g.batch * (gpus if parallel == "dp" else 1)
    return _step(g, dev, terms, gpus, parallel, step, fw, bw, opt, tp_comm + dp_comm, times,
                 memory_gb, compute=compute, exposed=exposed, recompute=recompute,
                 sequences=sequences, options=o)


def _step(g: StepGraph, dev: DeviceSpec, terms: StepTerms, gpus: int, parallel: str,
          step: float, fw: float, bw: float, opt: float, sync: float, times: KernelTimes,
          memory_gb: float, batch: int | None = None, roof_scale: float = 1.0, *,
          compute: float = 0.0, exposed: float = 0.0, bubble: float = 0.0,
          recompute: float = 0.0, sequences: int = 0, micro_batches: int = 1,
          options: StepOptions | None = None, spec: ModelSpec | None = None,
          memory_parts: Mapping[str, float] | None = None) -> TransformerStep:
    lo, hi = terms.interval(g.mode, g.precision)
    o = options or StepOptions()
    return TransformerStep(
        model=g.model, device=dev.name, mode=g.mode, seq_len=g.seq_len,
        batch=g.batch if batch is None else batch, precision=g.precision, gpus=gpus,
        parallel=parallel, step_time_s=step, step_time_lo_s=step * math.exp(lo),
        step_time_hi_s=step * math.exp(hi), forward_s=fw, backward_s=bw, optimizer_s=opt,
        sync_s=sync, roofline_s=roof_scale * float(np.sum(times.counts * times.roofline_s)),
        memory_gb=memory_gb, kernels=int(np.sum(times.counts)),
        params=float(g.params.get("total", 0.0)), compute_s=compute, exposed_comm_s=exposed,
        bubble_s=bubble, recompute_s=recompute, micro_batches=micro_batches, zero=o.zero,
        activation_checkpointing=o.activation_checkpointing,
        sequence_parallel=o.sequence_parallel,
        memory_parts_gb=dict(memory_parts or {}))


def pipeline_step(g_micro: StepGraph, dev: DeviceSpec, times: KernelTimes, terms: StepTerms,
                  stages: int, micro_batches: int, memory_gb: float = 0.0,
                  options: StepOptions | None = None,
                  collectives: Collectives | None = None) -> TransformerStep:
    """1F1B pipeline over ``stages`` GPUs (Narayanan et al., PipeDream-Flush, 2021; Megatron-
    LM's default): ``g_micro`` is the whole model at one micro-batch; each stage runs
    ``1 / stages`` of it ``m`` times; the pipeline fills and drains, so the step lasts
    ``m + p - 1`` slots of one micro-batch's forward and backward on one stage, the bubble
    being ``(p - 1) / (m + p - 1)`` of it; each slot sends ``s b h`` activations to the next
    stage (and their gradient back in training) on the critical path."""
    o = options or StepOptions()
    c = collectives or shipped_collectives()
    train = g_micro.mode == "train"
    fw, bw, opt = (times.phase_s(terms, p) for p in PHASES)
    recompute = (times.phase_s(terms, "forward", layers_only=True)
                 if train and o.activation_checkpointing else 0.0)
    m, p = micro_batches, stages
    slot = (fw + bw + recompute) / p
    act = g_micro.batch * g_micro.seq_len * g_micro.hidden * DTYPE_BYTES[g_micro.precision]
    send = (2 if train else 1) * send_recv_s(act, dev, c)
    compute = m * slot + opt / p
    bubble = (p - 1) * slot
    exposed = (m + p - 1) * send
    step = compute + bubble + exposed
    return _step(g_micro, dev, terms, stages, "pp", step, m * fw / p, m * bw / p,
                 opt / p, (m + p - 1) * send, times, memory_gb,
                 batch=g_micro.batch * m, roof_scale=m / p, compute=compute, exposed=exposed,
                 bubble=bubble, recompute=m * recompute / p, sequences=g_micro.batch * m,
                 micro_batches=m, options=o)


def _with_mfu(st: TransformerStep, spec: ModelSpec, g: StepGraph, dev: DeviceSpec,
              parts: Mapping[str, float], nodes: int = 1) -> TransformerStep:
    from dataclasses import replace

    sequences = st.batch * (st.gpus if st.parallel == "dp" else 1)
    flops = model_flops(spec, g, sequences)
    peak = dev.peak_tflops(g.precision) * 1e12 * st.gpus
    return replace(st, model_flops=flops, mfu=flops / (st.step_time_s * peak),
                   memory_parts_gb=dict(parts), nodes=int(nodes))


def predict_transformer(spec: ModelSpec, mode: str, seq_len: int, batch: int,
                        dev: DeviceSpec, model: KernelModel, terms: StepTerms,
                        gpus: int = 1, parallel: str = "dp", precision: str = "fp32",
                        head: str | None = None, micro_batches: int = 0,
                        accumulate_grads: bool = False, nodes: int = 1,
                        options: StepOptions | None = None,
                        collectives: Collectives | None = None) -> TransformerStep:
    """Predicted step of ``spec`` at ``batch`` sequences per GPU (data parallel) or per
    replica (tensor and pipeline parallel) on ``gpus`` x ``dev`` of one node.

    Raises :class:`DeviceMemoryError` when one GPU's share does not fit in the device's
    memory (:func:`workbench.compute.transformer.step_memory`; the message names the part
    that does not fit and the smallest change that fits), ``ValueError`` for a bad mode,
    precision, parallelism, a sequence longer than the config allows, or a GPU count that
    exceeds the node.
    """
    o = options or StepOptions(micro_batches=micro_batches)
    if micro_batches and not o.micro_batches:
        from dataclasses import replace

        o = replace(o, micro_batches=micro_batches)
    if parallel not in PARALLEL:
        raise ValueError(f"parallel {parallel!r}: use one of {', '.join(PARALLEL)}")
    if gpus < 1 or gpus > dev.gpus_per_node * nodes or (parallel != "dp" and nodes > 1):
        raise ValueError(f"--gpus {gpus}: one node of {dev.name} holds 1..{dev.gpus_per_node} "
                         "GPUs (across nodes only data parallelism is modelled)")
    if o.zero not in ZERO_STAGES:
        raise ValueError(f"--zero {o.zero}: use 0, 1, 2 or 3")
    if o.zero and (mode != "train" or parallel == "pp" or (
            parallel == "tp" and o.zero_over < 2)):
        raise ValueError(f"--zero {o.zero} shards over data-parallel GPUs in training; use it "
                         "with --parallel dp --mode train")
    check_seq_len(spec, seq_len)
    if precision == "bf16":
        dev.peak_tflops("bf16")  # raises on a device without BF16
    if parallel == "tp" and gpus > 1 and spec.heads % gpus:
        raise ValueError(f"--gpus {gpus} with --parallel tp: {spec.name}'s {spec.heads} "
                         f"attention heads do not split {gpus} ways; use a divisor of "
                         f"{spec.heads} ({', '.join(map(str, _divisors(spec.heads, gpus)))})")
    tp = gpus if parallel == "tp" else 1
    stages = gpus if parallel == "pp" else 1
    m = 1
    if stages > 1:
        if stages > spec.total_layers:
            raise ValueError(f"--gpus {gpus} pipeline stages exceed {spec.name}'s "
                             f"{spec.total_layers} layers; use {spec.total_layers} or fewer")
        m = o.micro_batches or min(batch, 4 * stages)
        if batch % m:
            raise ValueError(f"--batch {batch} does not split into {m} micro-batches; give a "
                             "multiple (or --micro-batches a divisor of the batch)")
    elif o.micro_batches > 1:
        raise ValueError("--micro-batches is for --parallel pp (pipeline micro-batches)")
    g = build_step_graph(spec, mode, seq_len, batch // m, precision, tp, head,
                         accumulate_grads)
    params = g.params["total"]
    dp = o.zero_over or (gpus if parallel == "dp" else 1)
    mem = step_memory(spec, mode, seq_len, batch // m, precision, params, tp, pp=stages,
                      dp=dp, zero=o.zero, checkpointing=o.activation_checkpointing,
                      sequence_parallel=o.sequence_parallel, in_flight=min(m, stages))
    if mem.total > dev.memory_gb * 1e9:
        raise DeviceMemoryError(_memory_message(spec, mode, seq_len, batch, precision,
                                                params, dev, gpus, parallel, m, o, mem))
    times = kernel_times(g, dev, model)
    if stages > 1:
        st = pipeline_step(g, dev, times, terms, stages, m, mem.total / 1e9, o, collectives)
    else:
        st = assemble_step(g, dev, times, terms, gpus, parallel, mem.total / 1e9, nodes, o,
                           collectives)
    return _with_mfu(st, spec, g, dev, mem.parts_gb(), nodes)


def _divisors(n: int, upto: int) -> list[int]:
    return [d for d in range(2, max(upto, 8) + 1) if n % d == 0][:6] or [1]


def _memory_message(spec: ModelSpec, mode: str, seq_len: int, batch: int, precision: str,
                    params: float, dev: DeviceSpec, gpus: int, parallel: str, m: int,
                    o: StepOptions, mem: StepMemory) -> str:
    """The memory error: the part that does not fit and the smallest change that fits."""
    from dataclasses import replace

    cap = dev.memory_gb * 1e9

    def need(b: int, opts: StepOptions, n: int = gpus, par: str = parallel) -> float:
        tp = n if par == "tp" else 1
        pp = n if par == "pp" else 1
        mm = 1 if pp == 1 else max(1, min(m, b))
        return step_memory(spec, mode, seq_len, max(b // mm, 1), precision, params, tp, pp=pp,
                           dp=n if par == "dp" else 1, zero=opts.zero,
                           checkpointing=opts.activation_checkpointing,
                           sequence_parallel=opts.sequence_parallel,
                           in_flight=min(mm, pp)).total

    head = (f"{spec.name} {mode} at batch {batch} x {seq_len} tokens needs "
            f"{mem.total / 1e9:.1f} GB per GPU, more than {dev.name}'s {dev.memory_gb:g} GB")
    fix = ""
    if mem.states > cap or mode != "train":
        what = ("the weights" if mode != "train" else
                f"the weights, gradients and Adam states ({mem.states / 1e9:.1f} GB)")
        part = f"{what} alone do not fit" if mem.states > cap else (
            f"the activations ({mem.activations / 1e9:.1f} GB) do not fit beside the weights")
        cands: list[tuple[str, float]] = []
        if mem.states <= cap:
            b = _largest(lambda x: need(x, o), cap, batch)
            if b:
                cands.append((f"--batch {b}", 0.0))
        if parallel == "dp" and gpus > 1 and mode == "train":
            cands += [(f"--zero {z}", need(batch, replace(o, zero=z)))
                      for z in (1, 2, 3) if z > o.zero]
        for n in (2, 4, 8):
            if n <= dev.gpus_per_node and n > (gpus if parallel != "dp" else 1):
                if spec.heads % n == 0:
                    cands.append((f"--parallel tp --gpus {n}", need(batch, replace(o, zero=0),
                                                                    n, "tp")))
                if n <= spec.total_layers:
                    cands.append((f"--parallel pp --gpus {n}", need(batch, replace(o, zero=0),
                                                                    n, "pp")))
        fix = next((f for f, v in cands if v <= cap), "")
    else:
        part = (f"the activations ({mem.activations / 1e9:.1f} GB) do not fit in the "
                f"{(cap - mem.states) / 1e9:.1f} GB left beside the weights, gradients and "
                f"Adam states ({mem.states / 1e9:.1f} GB)")
        ck = replace(o, activation_checkpointing=True)
        if not o.activation_checkpointing and need(batch, ck) <= cap:
            fix = "--activation-checkpointing"
        else:
            b = _largest(lambda x: need(x, o), cap, batch)
            bc = _largest(lambda x: need(x, ck), cap, batch)
            if b:
                fix = f"--batch {b}"
            elif bc:
                fix = f"--activation-checkpointing --batch {bc}"
    hint = (f"smallest change that fits: {fix}" if fix else
            f"it does not fit on one node of {dev.name}: use a device with more memory")
    return f"{head}: {part}; {hint}"


def _largest(need: Any, capacity: float, below: int) -> int:
    """The largest power-of-two batch below ``below`` whose memory fits (0: none)."""
    best, b = 0, 1
    while b < below and need(b) <= capacity:
        best, b = b, 2 * b
    return best
