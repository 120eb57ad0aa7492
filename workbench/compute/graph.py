"""Computation graphs of training jobs: operations with FLOPs and bytes, and their edges.

A :class:`Graph` lists the forward operations of one training step of a model, each with
its cost *per sample* of the batch and its batch-independent parameter bytes, so that the
graph at any local batch ``b`` follows by scaling::

    flops(b) = b * flops_per_sample
    bytes(b) = b * act_bytes_per_sample + param_bytes

``act_bytes_per_sample`` counts the activations an operation reads and writes for one
sample, ``param_bytes`` the weights it reads (FP32: 4 bytes per number). Training runs the
backward pass as well; :mod:`workbench.compute.predict` charges it (about twice the forward
FLOPs and bytes for every operation) and the optimizer update (``param_bytes`` read and
written a few times). ``kernels`` is the number of device kernels the forward operation
launches (an LSTM layer launches several per time step), which sets the fixed per-kernel
cost that does not shrink on a faster device.

Graphs ship as JSON (``workbench/data/compute/graphs/<app>.json``, written by
``tools/make_compute_graphs.py``) and load from ONNX (:func:`graph_from_onnx`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GRAPH_SCHEMA_VERSION = 1

OP_KINDS: tuple[str, ...] = ("conv", "gemm", "rnn", "elementwise", "norm", "pool",
                             "softmax", "embedding", "reduce")
"""Operation kinds. ``conv``, ``gemm`` and ``rnn`` are compute kernels (the DeepBench
classes); the others are memory-bound."""

COMPUTE_KINDS: frozenset[str] = frozenset({"conv", "gemm", "rnn"})


class GraphError(ValueError):
    """A graph file or model cannot be read; the message says what to fix."""


@dataclass(frozen=True)
class Op:
    """One forward operation of a training step.

    Attributes
    ----------
    name : str
        Unique name within the graph.
    kind : str
        One of :data:`OP_KINDS`.
    flops_per_sample : float
        Forward floating-point operations per sample (a multiply-add counts 2).
    act_bytes_per_sample : float
        Activation bytes read plus written per sample, forward.
    param_bytes : float
        Parameter bytes the operation reads (independent of the batch).
    kernels : int
        Device kernels launched by the forward operation.
    inputs : tuple of str
        Names of the operations whose output it reads (the graph's edges).
    dims : tuple of int
        The kernel's shape for one sample, where known, read by the kernel-level path
        (:mod:`workbench.compute.apps`); empty where not (ONNX imports, recurrent layers).
        By kind: ``conv`` ``(C_in, C_out, k, H, stride, pad)`` (square image and filter);
        ``gemm`` ``(rows, K, N)`` for a layer with weights (``rows x K`` times ``K x N``)
        or ``(products, M, N, K)`` for batched products of activations; ``norm`` and
        ``softmax`` ``(rows, cols)`` (a BatchNorm's rows are its channels, its columns a
        channel's pixels); ``embedding`` ``(lookups, table rows, width)``; the rest
        ``(elements,)``. A batch of ``b`` multiplies the first entry (``conv``: the batch).
    """

    name: str
    kind: str
    flops_per_sample: float
    act_bytes_per_sample: float
    param_bytes: float = 0.0
    kernels: int = 1
    inputs: tuple[str, ...] = ()
    dims: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in OP_KINDS:
            raise GraphError(f"op {self.name!r}: kind {self.kind!r} is not one of {OP_KINDS}")
        for f in ("flops_per_sample", "act_bytes_per_sample", "param_bytes"):
            v = getattr(self, f)
            if not (v >= 0 and v < float("inf")):
                raise GraphError(f"op {self.name!r}: {f} must be finite and >= 0, got {v!r}")
        if self.kernels < 1:
            raise GraphError(f"op {self.name!r}: kernels must be >= 1, got {self.kernels}")
        if any(int(d) < 0 for d in self.dims):
            raise GraphError(f"op {self.name!r}: dims must be >= 0, got {self.dims}")


@dataclass(frozen=True)
class Graph:
    """The forward operations of one model's training step, per sample, with edges.

    Attributes
    ----------
    name : str
        Model name (``"imagenet"`` for the Pollux ResNet-50 app).
    ops : tuple of Op
        Operations in a topological order.
    reference_batch : int
        Local batch the graph describes in its totals (:meth:`totals`); costs scale with it.
    optimizer : str
        ``"sgd"`` (momentum) or ``"adam"``: sets the bytes of the weight update.
    description : str
        The architecture and input size it was computed for.
    """

    name: str
    ops: tuple[Op, ...]
    reference_batch: int = 1
    optimizer: str = "sgd"
    description: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ops:
            raise GraphError(f"graph {self.name!r} has no operations")
        seen: set[str] = set()
        for op in self.ops:
            if op.name in seen:
                raise GraphError(f"graph {self.name!r}: duplicate op name {op.name!r}")
            missing = [i for i in op.inputs if i not in seen]
            if missing:
                raise GraphError(f"graph {self.name!r}: op {op.name!r} reads {missing}, "
                                 "which are not earlier ops (ops must be in topological order)")
            seen.add(op.name)
        if self.reference_batch < 1:
            raise GraphError(f"graph {self.name!r}: reference_batch must be >= 1")
        if self.optimizer not in OPTIMIZER_STATE_COPIES:
            raise GraphError(f"graph {self.name!r}: optimizer {self.optimizer!r} is not one "
                             f"of {sorted(OPTIMIZER_STATE_COPIES)}")

    @property
    def param_bytes(self) -> float:
        """Bytes of all parameters = bytes of the gradient all-reduced each step (FP32)."""
        return float(sum(op.param_bytes for op in self.ops))

    def flops(self, batch: float) -> float:
        """Forward FLOPs of one step at local batch ``batch``: ``b * sum flops_per_sample``."""
        return float(batch) * sum(op.flops_per_sample for op in self.ops)

    def totals(self, batch: float | None = None) -> dict[str, float]:
        """Forward FLOPs, bytes, parameter bytes and kernel count at ``batch``
        (default: the reference batch)."""
        b = float(self.reference_batch if batch is None else batch)
        return {
            "batch": b,
            "flops": self.flops(b),
            "bytes": sum(b * op.act_bytes_per_sample + op.param_bytes for op in self.ops),
            "param_bytes": self.param_bytes,
            "kernels": float(sum(op.kernels for op in self.ops)),
        }


OPTIMIZER_STATE_COPIES: Mapping[str, int] = {"sgd": 5, "adam": 7}
"""Parameter-sized arrays read or written by one update: SGD with momentum reads weight,
gradient, momentum and writes weight, momentum (5); Adam adds the second moment (7)."""


# --------------------------------------------------------------------------- JSON


def graph_to_dict(g: Graph) -> dict[str, Any]:
    """Plain-JSON form of a graph (``schema_version`` 1)."""
    return {
        "schema_version": GRAPH_SCHEMA_VERSION,
        "name": g.name,
        "reference_batch": g.reference_batch,
        "optimizer": g.optimizer,
        "description": g.description,
        "meta": dict(g.meta),
        "ops": [_op_dict(op) for op in g.ops],
    }


def _op_dict(op: Op) -> dict[str, Any]:
    d = {**asdict(op), "inputs": list(op.inputs), "dims": list(op.dims)}
    if not op.dims:
        del d["dims"]  # graphs without kernel shapes are written as before
    return d


def graph_from_dict(d: Mapping[str, Any]) -> Graph:
    """Inverse of :func:`graph_to_dict`; errors name the graph and the field."""
    if d.get("schema_version") != GRAPH_SCHEMA_VERSION:
        raise GraphError(f"graph document has schema_version {d.get('schema_version')!r}; "
                         f"this workbench reads {GRAPH_SCHEMA_VERSION}")
    try:
        ops = tuple(
            Op(name=str(o["name"]), kind=str(o["kind"]),
               flops_per_sample=float(o["flops_per_sample"]),
               act_bytes_per_sample=float(o["act_bytes_per_sample"]),
               param_bytes=float(o.get("param_bytes", 0.0)), kernels=int(o.get("kernels", 1)),
               inputs=tuple(str(i) for i in o.get("inputs", ())),
               dims=tuple(int(x) for x in o.get("dims", ())))
            for o in d["ops"]
        )
        return Graph(name=str(d["name"]), ops=ops, reference_batch=int(d["reference_batch"]),
                     optimizer=str(d.get("optimizer", "sgd")),
                     description=str(d.get("description", "")), meta=dict(d.get("meta", {})))
    except (KeyError, TypeError) as exc:
        raise GraphError(f"graph {d.get('name', '?')!r}: missing or bad field {exc}") from None


def graphs_dir() -> Path:
    """Folder of the shipped graphs (``workbench/data/compute/graphs``)."""
    return Path(__file__).resolve().parent.parent / "data" / "compute" / "graphs"


def app_graph_names() -> list[str]:
    """Names of the shipped graphs (the six Pollux apps and the Zeus variants)."""
    return sorted(p.stem for p in graphs_dir().glob("*.json"))


def load_graph(name_or_path: str | Path) -> Graph:
    """A shipped graph by name (``"imagenet"``), or a graph from a ``.json`` or ``.onnx``
    file.

    Raises :class:`GraphError` naming the known graphs when ``name_or_path`` is neither.
    """
    p = Path(name_or_path)
    if p.suffix.lower() == ".onnx":
        return graph_from_onnx(p)
    if p.suffix.lower() == ".json":
        if not p.is_file():
            raise GraphError(f"graph file {p} not found")
        try:
            return graph_from_dict(json.loads(p.read_text()))
        except json.JSONDecodeError as exc:
            raise GraphError(f"{p} is not valid JSON: {exc}") from None
    shipped = graphs_dir() / f"{name_or_path}.json"
    if not shipped.is_file():
        raise GraphError(f"no graph for app {str(name_or_path)!r}; known: "
                         f"{', '.join(app_graph_names())} (or pass a .onnx/.json file)")
    return graph_from_dict(json.loads(shipped.read_text()))


def write_graph(g: Graph, path: Path | str) -> None:
    """Write ``g`` as JSON (one op per line keeps diffs readable)."""
    d = graph_to_dict(g)
    ops = d.pop("ops")
    head = json.dumps(d, indent=1)[:-2]
    body = ",\n".join("  " + json.dumps(o) for o in ops)
    Path(path).write_text(f'{head},\n "ops": [\n{body}\n ]\n}}\n')


# --------------------------------------------------------------------------- ONNX

_ELEMENTWISE = {"Relu", "Add", "Mul", "Sub", "Div", "Sigmoid", "Tanh", "Clip", "LeakyRelu",
                "Gelu", "Erf", "Dropout", "Sqrt", "Pow", "Exp", "Neg", "HardSigmoid",
                "HardSwish", "Cast", "Where", "Max", "Min", "Identity"}
_NORM = {"BatchNormalization", "LayerNormalization", "InstanceNormalization",
         "GroupNormalization"}
_POOL = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax"}
_SHAPE_ONLY = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Shape", "Gather",
               "Concat", "Slice", "Constant", "ConstantOfShape", "Expand", "Split"}
_BYTES = {1: 4, 10: 2, 11: 8, 16: 2, 6: 4, 7: 8, 9: 1, 2: 1, 3: 1}  # onnx TensorProto dtype


def _shape(vi: Any) -> tuple[int | None, ...]:
    dims = vi.type.tensor_type.shape.dim
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)


def _numel(shape: Sequence[int | None], batch_dim_value: int) -> float:
    n = 1.0
    for i, d in enumerate(shape):
        n *= float(d if d is not None else (batch_dim_value if i == 0 else 1))
    return n


def _node_cost(t: str, node: Any, attrs: dict[str, Any], out_n: float,
               numel: Callable[[str], float],
               vinfo: dict[str, tuple[tuple[int | None, ...], int]],
               init_arr: dict[str, Any], batch: int) -> tuple[float, str, int]:
    """FLOPs of one ONNX node of type ``t`` (for the whole reference batch), its op kind
    (``"unknown"`` for a type charged as elementwise) and its kernel launches (see
    :func:`graph_from_onnx`)."""
    kernels = 1
    if t == "Conv":
        w = init_arr.get(node.input[1])
        wshape = w.shape if w is not None else vinfo.get(node.input[1], ((),))[0]
        per_out = 1.0  # weight (C_out, C_in/groups, k...): MACs per output element
        for d in list(wshape)[1:]:
            per_out *= float(d or 1)
        flops = 2.0 * out_n * per_out
        kind = "conv"
    elif t in ("MatMul", "Gemm"):
        a_shape = vinfo.get(node.input[0], ((),))[0]
        kdim = a_shape[-1] if a_shape else None
        if t == "Gemm" and int(attrs.get("transA", 0)) and len(a_shape) >= 2:
            kdim = a_shape[-2]
        flops = 2.0 * out_n * float(kdim or 1)
        kind = "gemm"
    elif t in ("LSTM", "GRU", "RNN"):
        gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[t]
        hidden = int(attrs.get("hidden_size", 0))
        x_shape = vinfo.get(node.input[0], ((),))[0]
        steps = float(x_shape[0] or 1) if x_shape else 1.0
        feat = float(x_shape[-1] or 1) if x_shape else 1.0
        dirs = 2 if attrs.get("direction", b"forward") in (b"bidirectional",
                                                            "bidirectional") else 1
        # x_shape is (T, N, I): N is the batch in ONNX's RNN layout.
        n_batch = float(x_shape[1] or batch) if len(x_shape) > 1 else float(batch)
        flops = 2.0 * gates * hidden * (feat + hidden) * steps * dirs * n_batch
        kernels = int(2 * steps * dirs)
        kind = "rnn"
    elif t in _NORM:
        flops, kind = 5.0 * out_n, "norm"
    elif t in _POOL:
        flops, kind = out_n * 2.0, "pool"
    elif t in ("Softmax", "LogSoftmax"):
        flops, kind = 5.0 * out_n, "softmax"
    elif t in _REDUCE:
        flops, kind = numel(node.input[0]), "reduce"
    elif t in _ELEMENTWISE:
        flops, kind = out_n, "elementwise"
    else:
        flops, kind = out_n, "unknown"
    return flops, kind, kernels


def graph_from_onnx(path: Path | str, name: str | None = None) -> Graph:
    """Read an ONNX model into a :class:`Graph` (costs per sample of the first input's
    leading dimension).

    Shapes come from ONNX shape inference. FLOPs: ``Conv`` ``2 * out * C_in/groups * prod(kernel)``,
    ``MatMul``/``Gemm`` ``2 * M * N * K``, ``LSTM``/``GRU`` ``2 * gates * H * (I + H) * T``
    per direction, elementwise/norm/pool ops one FLOP per output element (memory-bound:
    their bytes dominate). Bytes are inputs plus outputs; initializers are parameters.
    Shape-only ops (``Reshape``, ``Transpose``, ...) cost nothing. An unknown op type is
    charged as elementwise with a warning; a symbolic leading dimension is the batch.
    """
    try:
        import onnx
        from onnx import numpy_helper, shape_inference
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise GraphError(f"reading ONNX needs the onnx package ({exc})") from None
    p = Path(path)
    if not p.is_file():
        raise GraphError(f"ONNX file {p} not found")
    try:
        model = onnx.load(str(p))
        model = shape_inference.infer_shapes(model)
    except Exception as exc:  # noqa: BLE001 - onnx raises many types for a bad file
        raise GraphError(f"{p} is not a readable ONNX model: {exc}") from None
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    init_arr = {k: numpy_helper.to_array(t) for k, t in inits.items()}
    real_inputs = [i for i in g.input if i.name not in inits]
    if not real_inputs:
        raise GraphError(f"{p}: the model has no (non-initializer) inputs")
    first = _shape(real_inputs[0])
    batch = int(first[0]) if first and first[0] else 1
    vinfo: dict[str, tuple[tuple[int | None, ...], int]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        vinfo[vi.name] = (_shape(vi), _BYTES.get(vi.type.tensor_type.elem_type, 4))
    for k, t in inits.items():
        vinfo[k] = (tuple(int(x) for x in t.dims), _BYTES.get(t.data_type, 4))

    def numel(t: str) -> float:
        if t not in vinfo:
            return 0.0
        return _numel(vinfo[t][0], batch)

    def nbytes(t: str) -> float:
        return numel(t) * vinfo[t][1] if t in vinfo else 0.0

    producer: dict[str, str] = {}
    ops: list[Op] = []
    unknown: set[str] = set()
    for k, node in enumerate(g.node):
        t = node.op_type
        if t in _SHAPE_ONLY:
            # Pass-through: later ops read from whatever produced the data input.
            src = next((producer[i] for i in node.input if i in producer), None)
            for o in node.output:
                if src is not None:
                    producer[o] = src
            continue
        out = node.output[0]
        out_n = numel(out)
        params = sum(nbytes(i) for i in node.input if i in inits)
        act = sum(nbytes(i) for i in node.input if i not in inits) + sum(
            nbytes(o) for o in node.output)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        flops, kind, kernels = _node_cost(t, node, attrs, out_n, numel, vinfo, init_arr, batch)
        if kind == "unknown":
            unknown.add(t)
            kind = "elementwise"
        nm = node.name or f"{t.lower()}_{k}"
        while any(o.name == nm for o in ops):
            nm = f"{nm}_{k}"
        ins = tuple(dict.fromkeys(producer[i] for i in node.input if i in producer))
        ops.append(Op(name=nm, kind=kind, flops_per_sample=flops / batch,
                      act_bytes_per_sample=act / batch, param_bytes=params, kernels=kernels,
                      inputs=ins))
        for o in node.output:
            producer[o] = nm
    if unknown:
        log.warning("%s: op types %s charged as elementwise", p.name, sorted(unknown))
    if not ops:
        raise GraphError(f"{p}: no operations with a cost (only shape ops?)")
    return Graph(name=name or p.stem, ops=tuple(ops), reference_batch=batch,
                 description=f"from ONNX {p.name} ({len(g.node)} nodes)")
