"""Operator graphs of transformer steps: the device kernels of forward, backward, optimizer.

:func:`build_step_graph` turns a :class:`~workbench.compute.transformer.ModelSpec`, a mode
(``train`` or ``inference``), sequence length ``s``, batch ``b`` and precision into the
kernels one step launches, in the granularity of Hugging Face's eager PyTorch models (the
granularity NeuSight's public operator graphs and measurements have): every GEMM, batched
matmul, softmax, norm and element-wise kernel is listed, with

* ``dims``: ``linear``/``bmm`` ``(B, M, N, K)`` = ``B`` products of an ``M x K`` by a
  ``K x N`` matrix (``2 B M N K`` FLOPs); ``ln``/``softmax`` ``(rows, cols)``;
  ``elementwise`` ``(numel,)`` with ``op`` (``unary``, ``binary``, ``copy``, ``adam``, or
  the activation's name);
* ``flops`` and ``bytes`` (operands read plus results written, at 4 bytes per number in
  FP32 and 2 in BF16; the optimizer's FP32 state at 4).

Backward follows autograd: a linear layer ``Y = X W`` runs ``dX = dY W^T`` and ``dW^T = dY^T X``
(two GEMMs of the forward's FLOPs each, so training GEMMs total ``6 x parameters x tokens``);
a batched matmul runs two; an element-wise op runs the kernels its derivative needs
(``add``: none, ``mul``: two, a unary function: one reading ``x`` and ``dY``); norms and
softmax one kernel reading two tensors and writing one; an embedding lookup zero-fills and
scatters into its ``V x h`` gradient. The cross-entropy loss is a log-softmax over the
logits and its backward. Adam's step is one fused kernel over the parameters: read weight,
gradient and two moments, write three (28 bytes per parameter). With
``accumulate_grads`` every weight gradient is added into ``.grad`` (NeuSight's measured
runs do this; PyTorch >= 2.0 with ``zero_grad(set_to_none=True)`` does not).

Tensor parallelism over ``t`` GPUs (Megatron-LM, Shoeybi et al. 2019): attention heads and
the feed-forward width are split ``t`` ways (column-parallel QKV and first FFN GEMM,
row-parallel output and second GEMM), the vocabulary of embedding and LM head too; each
layer all-reduces its ``s b h`` activations twice forward and twice backward, the
embedding once each way (:attr:`StepGraph.tp_allreduces`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from workbench.compute.transformer import DTYPE_BYTES, MODES, PRECISIONS, ModelSpec

KERNEL_KINDS: tuple[str, ...] = ("linear", "bmm", "conv", "ln", "softmax", "elementwise")
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")
HEADS: tuple[str, ...] = ("lm", "classification", "pretraining")

ADAM_BYTES_PER_PARAM = 28
"""Adam's fused step: read weight, gradient, first and second moment, write weight and both
moments, at 4 bytes each (the FP32 master copy in mixed precision)."""


@dataclass(frozen=True)
class Kernel:
    """``count`` identical device kernels of one step (see the module docstring)."""

    name: str
    kind: str
    phase: str
    dims: tuple[int, ...]
    flops: float
    bytes: float
    count: int = 1
    op: str = ""
    layer: bool = False  # inside a transformer block: what checkpointing recomputes

    def __post_init__(self) -> None:
        if self.kind not in KERNEL_KINDS or self.phase not in PHASES:
            raise ValueError(f"kernel {self.name!r}: kind {self.kind!r} / phase "
                             f"{self.phase!r} unknown")
        sizes = self.dims[:6] if self.kind == "conv" else self.dims  # a conv's pad may be 0
        if self.count < 1 or min(sizes, default=1) < 1 or min(self.dims, default=0) < 0:
            raise ValueError(f"kernel {self.name!r}: dims {self.dims} and count {self.count} "
                             "must be >= 1 (a convolution's padding >= 0)")


@dataclass(frozen=True)
class StepGraph:
    """The kernels of one step on one GPU, and what the step moves between GPUs.

    Attributes
    ----------
    kernels : tuple of Kernel
    params : Mapping[str, float]
        Parameters by group (``embedding``, ``layers``, ``head``) and ``total``, of the
        whole model; ``local`` is the part one GPU holds under tensor parallelism.
    tp_allreduces : tuple of (float, int)
        ``(bytes, count)`` of the activation all-reduces tensor parallelism adds.
    """

    model: str
    mode: str
    seq_len: int
    batch: int
    precision: str
    tp: int
    kernels: tuple[Kernel, ...]
    params: Mapping[str, float] = field(default_factory=dict)
    tp_allreduces: tuple[tuple[float, int], ...] = ()
    head: str = "lm"
    hidden: int = 0

    def select(self, phase: str | None = None, kind: str | None = None) -> list[Kernel]:
        """Kernels of one phase and/or kind."""
        return [k for k in self.kernels if (phase is None or k.phase == phase)
                and (kind is None or k.kind == kind)]

    def flops(self, phase: str | None = None, kind: str | None = None) -> float:
        """Total FLOPs of the selected kernels (counts included)."""
        return float(sum(k.flops * k.count for k in self.select(phase, kind)))

    def kernel_count(self, phase: str | None = None, kind: str | None = None) -> int:
        """Kernel launches of the selected kernels."""
        return int(sum(k.count for k in self.select(phase, kind)))

    @property
    def gradient_bytes(self) -> float:
        """Bytes of the gradient one GPU all-reduces under data parallelism: its local
        parameters in FP32 (``torch.autocast`` keeps FP32 weights, so FP32 gradients)."""
        return float(self.params.get("local", 0.0)) * 4


# --------------------------------------------------------------------------- builder

_NO_GRAD_OPS, _TWO_GRAD_OPS = frozenset({"add", "addu"}), frozenset({"mul", "div"})
_ACT_OPS = frozenset({"gelu", "relu", "tanh", "silu", "pow", "rsqrt", "exp"})


class KernelBuilder:
    """Collects forward kernels with their backward kernels and parameter tallies (the
    transformer families here; the Pollux apps' kernels in :mod:`workbench.compute.apps`)."""

    def __init__(self, w: int, train: bool, accumulate_grads: bool, tp: int) -> None:
        self.w, self.train, self.acc, self.tp = w, train, accumulate_grads, tp
        self.out: list[Kernel] = []
        self.params: dict[str, float] = {"embedding": 0.0, "layers": 0.0, "head": 0.0}
        self.local = 0.0
        self.allreduce_fwd = 0  # activation all-reduces per step (forward; backward mirrors)
        self.group = "layers"
        self.repeat = 1
        self.in_block = False

    # ---- emit helpers
    def emit(self, name: str, kind: str, phase: str, dims: tuple[int, ...], flops: float,
             nbytes: float, op: str = "") -> None:
        """One kernel as it is, no backward added."""
        self.out.append(Kernel(name, kind, phase, tuple(int(d) for d in dims), float(flops),
                               float(nbytes), self.repeat, op, self.in_block))

    def _param(self, n: float, split: int = 1) -> None:
        self.params[self.group] += n * self.repeat
        self.local += n / split * self.repeat
        if self.train and self.acc:
            self.emit("grad_accumulate", "elementwise", "backward", (max(1, int(n / split)),),
                      n / split, 3 * self.w * n / split, "binary")

    def linear(self, name: str, m: int, k: int, n: int, bias: bool = True, split: int = 1,
               shared: bool = False, row_parallel: bool = False) -> None:
        """``Y[m, n] = X[m, k] W[k, n] (+ b)``; ``split``: the tensor-parallel degree the
        weight is split over (already applied to ``n``, or to ``k`` when
        ``row_parallel``, whose bias is then whole); ``shared``: tied to another weight."""
        w = self.w
        self.emit(name, "linear", "forward", (1, m, n, k), 2.0 * m * n * k,
                  w * (m * k + k * n + m * n + (n if bias else 0)))
        if self.train:
            self.emit(name + ".dX", "linear", "backward", (1, m, k, n), 2.0 * m * n * k,
                      w * (m * n + n * k + m * k))
            self.emit(name + ".dW", "linear", "backward", (1, n, k, m), 2.0 * m * n * k,
                      w * (k * m + m * n + k * n))
        b_full = (n if row_parallel else n * split) if bias else 0
        self._param((0 if shared else k * n * split) + b_full, split)

    def bmm(self, name: str, b: int, m: int, n: int, k: int) -> None:
        """``b`` products ``C[m, n] = A[m, k] B[k, n]``."""
        w = self.w
        self.emit(name, "bmm", "forward", (b, m, n, k), 2.0 * b * m * n * k,
                  w * b * (m * k + k * n + m * n))
        if self.train:
            self.emit(name + ".dA", "bmm", "backward", (b, m, k, n), 2.0 * b * m * n * k,
                      w * b * (m * n + n * k + m * k))
            self.emit(name + ".dB", "bmm", "backward", (b, k, n, m), 2.0 * b * m * n * k,
                      w * b * (k * m + m * n + k * n))

    def ew(self, name: str, op: str, numel: int, n_in: int = 1) -> None:
        """An element-wise kernel over ``numel`` outputs reading ``n_in`` full tensors
        (``op``: ``add``/``mul``/``div`` binary, ``addu``/``mulu``/``divu`` with a scalar,
        an activation name, ``copy``)."""
        w = self.w
        cost = "binary" if n_in >= 2 else ("copy" if op == "copy" else "unary")
        self.emit(name, "elementwise", "forward", (numel,), numel, w * numel * (n_in + 1),
                  op if op in _ACT_OPS else cost)
        if not self.train or op in _NO_GRAD_OPS:
            return
        if op in _TWO_GRAD_OPS and n_in >= 2:
            for g in ("dA", "dB"):
                self.emit(f"{name}.{g}", "elementwise", "backward", (numel,), numel,
                          3 * w * numel, "binary")
        elif op in ("mulu", "divu", "copy"):
            self.emit(name + ".d", "elementwise", "backward", (numel,), numel, 2 * w * numel,
                      "copy" if op == "copy" else "unary")
        else:
            self.emit(name + ".d", "elementwise", "backward", (numel,), 2 * numel,
                      3 * w * numel, "binary")

    def dropout(self, name: str, numel: int, p: float = 0.1) -> None:
        """Training only (eval mode launches nothing): mask and scale; backward a multiply."""
        if self.train and p > 0:
            self.ew(name, "mulu", numel)

    def norm(self, name: str, rows: int, cols: int) -> None:
        """LayerNorm over ``cols``: one kernel each way."""
        w = self.w
        self.emit(name, "ln", "forward", (rows, cols), 5.0 * rows * cols,
                  w * (2 * rows * cols + 2 * cols))
        if self.train:
            self.emit(name + ".d", "ln", "backward", (rows, cols), 8.0 * rows * cols,
                      w * (3 * rows * cols + 2 * cols))
        self._param(2 * cols)

    def rms_norm(self, name: str, rows: int, cols: int) -> None:
        """RMSNorm / T5LayerNorm as HF's eager code runs it: ``x.pow(2).mean(-1)``, ``+ eps``,
        ``rsqrt``, ``x * r``, ``weight * x``."""
        self.ew(name + ".pow", "pow", rows * cols)
        self.norm_reduce(name + ".mean", rows, cols)
        self.ew(name + ".eps", "addu", rows)
        self.ew(name + ".rsqrt", "rsqrt", rows)
        self.ew(name + ".scale", "mul", rows * cols, 2)
        self.ew(name + ".weight", "mul", rows * cols, 2)
        self._param(cols)

    def norm_reduce(self, name: str, rows: int, cols: int) -> None:
        """A row reduction (mean) over ``cols``: an ``ln``-kind kernel reading one tensor."""
        w = self.w
        self.emit(name, "ln", "forward", (rows, cols), 1.0 * rows * cols,
                  w * (rows * cols + rows))
        if self.train:
            self.emit(name + ".d", "elementwise", "backward", (rows * cols,), rows * cols,
                      w * (rows * cols + rows), "unary")

    def softmax(self, name: str, rows: int, cols: int) -> None:  # backward reads y and dY
        w = self.w
        self.emit(name, "softmax", "forward", (rows, cols), 5.0 * rows * cols,
                  2 * w * rows * cols)
        if self.train:
            self.emit(name + ".d", "softmax", "backward", (rows, cols), 4.0 * rows * cols,
                      3 * w * rows * cols)

    def embedding(self, name: str, tokens: int, rows: int, width: int, split: int = 1
                  ) -> None:
        """A lookup of ``tokens`` rows of a ``rows x width`` table (``split`` ways over the
        vocabulary); backward zero-fills the table's gradient and scatter-adds into it."""
        w = self.w
        local_rows = _vocab_split(rows, split)
        self.emit(name, "elementwise", "forward", (tokens * width,), 0.0,
                  w * 2 * tokens * width + 8 * tokens, "copy")
        if self.train:
            self.emit(name + ".zero", "elementwise", "backward", (local_rows * width,), 0.0,
                      w * local_rows * width, "copy")
            self.emit(name + ".scatter", "elementwise", "backward", (tokens * width,),
                      tokens * width, w * 3 * tokens * width, "binary")
        self._param(rows * width, split)

    def loss(self, rows: int, classes: int) -> None:
        """Cross-entropy over ``classes`` logits per row: log-softmax and its backward
        (plus the zero-filled gradient of the picked logits)."""
        if not self.train:
            return
        self.softmax("loss.log_softmax", rows, classes)
        self.emit("loss.nll.zero", "elementwise", "backward", (rows * classes,), 0.0,
                  self.w * rows * classes, "copy")

    def allreduce(self) -> None:
        """One tensor-parallel activation all-reduce (forward; backward mirrors it)."""
        self.allreduce_fwd += self.repeat if self.tp > 1 else 0


# --------------------------------------------------------------------------- families


_GELU_NEW = (("half", "mulu", 1), ("cube", "pow", 1), ("coef", "mulu", 1), ("inner", "add", 2),
             ("scale", "mulu", 1), ("tanh", "tanh", 1), ("one", "addu", 1), ("out", "mul", 2))
"""HF's ``NewGELUActivation``, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``: eight
kernels in eager PyTorch (name, op, inputs)."""


def _activation(b: KernelBuilder, s: ModelSpec, name: str, numel: int) -> None:
    if s.activation == "gelu_new":
        for part, op, n_in in _GELU_NEW:
            b.ew(f"{name}.{part}", op, numel, n_in)
    elif s.activation in ("gelu", "gelu_pytorch_tanh"):
        b.ew(name, "gelu", numel)
    elif s.activation in ("silu", "swish"):
        b.ew(name, "silu", numel)
    else:
        b.ew(name, s.activation, numel)


def _attention(b: KernelBuilder, s: ModelSpec, p: str, t: int, batch: int, q_len: int,
               kv_len: int, tp: int, *, fused_qkv: bool, scale: str, mask: str,
               rotary: bool = False, q_tokens: int | None = None) -> None:
    """Self- (or cross-) attention: projections, scores, mask, softmax, values, output."""
    heads, kv_heads, d, h = s.heads // tp, max(1, s.kv_heads // tp), s.head_dim, s.hidden
    inner, kv_inner = heads * d, kv_heads * d
    bias = s.family not in ("llama", "switch")
    tq = q_tokens if q_tokens is not None else t
    if fused_qkv:
        b.linear(p + ".qkv", tq, h, inner + 2 * kv_inner, bias, split=tp)
    else:
        b.linear(p + ".q", tq, h, inner, bias, split=tp)
        if scale == "q":
            b.ew(p + ".q_scale", "mulu", tq * inner)
        b.linear(p + ".k", t, h, kv_inner, bias, split=tp)
        if s.family == "opt":
            b.ew(p + ".k_contiguous", "copy", t * kv_inner)
        b.linear(p + ".v", t, h, kv_inner, bias, split=tp)
        if s.family == "opt":
            b.ew(p + ".v_contiguous", "copy", t * kv_inner)
            b.ew(p + ".q_contiguous", "copy", tq * inner)
    if rotary:
        for which, n in (("q", tq * inner), ("k", t * kv_inner)):
            b.ew(f"{p}.rope_{which}.cos", "mul", n, 2)
            b.ew(f"{p}.rope_{which}.neg", "mulu", n // 2)
            b.ew(f"{p}.rope_{which}.cat", "copy", n)
            b.ew(f"{p}.rope_{which}.sin", "mul", n, 2)
            b.ew(f"{p}.rope_{which}.add", "add", n, 2)
    if kv_heads < heads:  # repeat_kv: expand K and V to every query head
        b.ew(p + ".repeat_k", "copy", t * inner)
        b.ew(p + ".repeat_v", "copy", t * inner)
    bh = batch * heads
    scores = bh * q_len * kv_len
    b.bmm(p + ".scores", bh, q_len, kv_len, d)
    if scale == "div":
        b.ew(p + ".scale", "divu", scores)
    if mask == "where":
        b.ew(p + ".causal", "copy", scores)
    elif mask == "add":
        b.ew(p + ".mask", "add", scores, 2)
    b.softmax(p + ".softmax", bh * q_len, kv_len)
    b.dropout(p + ".dropout", scores, 0.0 if s.family in ("opt", "llama") else 0.1)
    b.bmm(p + ".context", bh, q_len, d, kv_len)
    b.ew(p + ".merge_heads", "copy", tq * inner)
    b.linear(p + ".out", tq, inner, h, bias, split=tp, row_parallel=True)
    b.allreduce()


def _mlp(b: KernelBuilder, s: ModelSpec, p: str, t: int, tp: int) -> None:
    h, f = s.hidden, s.ffn // tp
    bias = s.family not in ("llama", "switch")
    if s.family == "llama":
        b.linear(p + ".gate", t, h, f, False, split=tp)
        b.linear(p + ".up", t, h, f, False, split=tp)
        _activation(b, s, p + ".act", t * f)
        b.ew(p + ".gated", "mul", t * f, 2)
        b.linear(p + ".down", t, f, h, False, split=tp, row_parallel=True)
    else:
        b.linear(p + ".fc1", t, h, f, bias, split=tp)
        _activation(b, s, p + ".act", t * f)
        if s.family == "switch":
            b.dropout(p + ".dropout", t * f)
        b.linear(p + ".fc2", t, f, h, bias, split=tp, row_parallel=True)
    b.allreduce()


def _moe(b: KernelBuilder, s: ModelSpec, p: str, t: int, batch: int, seq: int, tp: int) -> None:
    """Switch's sparse MLP (HF ``SwitchTransformersSparseMLP``): a router, then each expert
    takes at most ``expert_capacity`` tokens of every sequence (routing assumed uniform:
    ``min(capacity, ceil(s / E))`` tokens per sequence per expert)."""
    h, f, e = s.hidden, s.ffn // tp, s.experts
    b.linear(p + ".router", t, h, e, False)
    b.softmax(p + ".router_softmax", t, e)
    per = batch * min(s.expert_capacity, -(-seq // e))
    for i in range(e):
        b.ew(f"{p}.expert{i}.gather", "copy", per * h)
        b.linear(f"{p}.expert{i}.wi", per, h, f, False, split=tp)
        _activation(b, s, f"{p}.expert{i}.act", per * f)
        b.linear(f"{p}.expert{i}.wo", per, f, h, False, split=tp, row_parallel=True)
        b.ew(f"{p}.expert{i}.scatter", "copy", per * h)
    b.ew(p + ".router_scale", "mul", t * h, 2)
    b.allreduce()


def _decoder_only(b: KernelBuilder, s: ModelSpec, batch: int, seq: int, tp: int, head: str
                  ) -> None:
    t, h = batch * seq, s.hidden
    fam = s.family
    b.group = "embedding"
    b.embedding("embed_tokens", t, s.vocab, s.embed_proj or h, split=tp)
    if s.embed_proj:
        b.group = "layers"
        b.linear("project_in", t, s.embed_proj, h, False)
        b.group = "embedding"
    if fam in ("gpt2", "opt", "bert"):
        b.embedding("embed_positions", t, s.positions, h)
        b.ew("embed_add", "add", t * h, 2)
    if fam == "bert":
        b.embedding("embed_token_types", t, s.type_vocab, h)
        b.ew("embed_add_types", "add", t * h, 2)
        b.norm("embed_norm", t, h)
    b.allreduce()
    b.dropout("embed_dropout", t * h)
    b.group = "layers"
    b.repeat, b.in_block = s.layers, True
    _layer(b, s, "layer", t, batch, seq, tp)
    b.repeat, b.in_block = 1, False
    b.group = "layers"
    if fam == "bert":
        _bert_head(b, s, t, batch, tp, head)
        return
    if fam == "llama":
        b.rms_norm("final_norm", t, h)
    else:
        b.norm("final_norm", t, h)
    if s.embed_proj:
        b.linear("project_out", t, h, s.embed_proj, False)
    b.group = "head"
    v = _vocab_split(s.vocab, tp)
    b.linear("lm_head", t, s.embed_proj or h, v, False, split=tp, shared=s.tied_embeddings)
    if fam == "opt":
        b.ew("logits_contiguous", "copy", t * v)
    b.loss(t, v)


def _layer(b: KernelBuilder, s: ModelSpec, p: str, t: int, batch: int, seq: int, tp: int
              ) -> None:
    """One block of a decoder-only or encoder-only model (pre- or post-norm per family)."""
    h = s.hidden
    fam = s.family
    if fam == "bert":
        _attention(b, s, p + ".attn", t, batch, seq, seq, tp, fused_qkv=False, scale="div",
                   mask="add")
        b.dropout(p + ".attn_dropout", t * h)
        b.ew(p + ".attn_residual", "add", t * h, 2)
        b.norm(p + ".attn_norm", t, h)
        _mlp(b, s, p + ".mlp", t, tp)
        b.dropout(p + ".mlp_dropout", t * h)
        b.ew(p + ".mlp_residual", "add", t * h, 2)
        b.norm(p + ".mlp_norm", t, h)
        return
    if fam == "llama":
        b.rms_norm(p + ".attn_norm", t, h)
    else:
        b.norm(p + ".attn_norm", t, h)
    _attention(b, s, p + ".attn", t, batch, seq, seq, tp, fused_qkv=fam == "gpt2",
               scale={"gpt2": "div", "opt": "q", "llama": "div"}[fam],
               mask={"gpt2": "where", "opt": "add", "llama": "add"}[fam],
               rotary=fam == "llama")
    b.dropout(p + ".attn_dropout", t * h, 0.0 if fam == "llama" else 0.1)
    b.ew(p + ".attn_residual", "add", t * h, 2)
    if fam == "llama":
        b.rms_norm(p + ".mlp_norm", t, h)
    else:
        b.norm(p + ".mlp_norm", t, h)
    _mlp(b, s, p + ".mlp", t, tp)
    b.dropout(p + ".mlp_dropout", t * h, 0.0 if fam == "llama" else 0.1)
    b.ew(p + ".mlp_residual", "add", t * h, 2)


def _bert_head(b: KernelBuilder, s: ModelSpec, t: int, batch: int, tp: int, head: str) -> None:
    """BERT's heads: ``lm`` (masked-LM: transform, norm, tied decoder), ``classification``
    (pooler and a two-class classifier), ``pretraining`` (both, the classifier being the
    next-sentence head; ``BertForPreTraining``)."""
    h = s.hidden
    b.group = "head"
    if head in ("classification", "pretraining"):
        b.ew("pooler.first_token", "copy", batch * h)
        b.linear("pooler.dense", batch, h, h)
        b.ew("pooler.tanh", "tanh", batch * h)
    if head in ("lm", "pretraining"):
        b.linear("lm_transform", t, h, h)
        _activation(b, s, "lm_transform.act", t * h)
        b.norm("lm_transform.norm", t, h)
        v = _vocab_split(s.vocab, tp)
        b.linear("lm_head", t, h, v, True, split=tp, shared=True)
        b.loss(t, v)
    if head in ("classification", "pretraining"):
        b.dropout("classifier.dropout", batch * h)
        b.linear("classifier", batch, h, 2)
        b.loss(batch, 2)


def _vocab_split(vocab: int, tp: int) -> int:
    """Vocabulary rows on one GPU: ``ceil(V / t)`` (Megatron pads the table)."""
    return -(-vocab // tp)


def _switch(b: KernelBuilder, s: ModelSpec, batch: int, seq: int, tp: int) -> None:
    """Switch Transformer (encoder-decoder, T5 blocks, a sparse MLP every
    ``sparse_step``-th block; the decoder reads ``seq`` tokens too)."""
    t, h = batch * seq, s.hidden
    b.group = "embedding"
    b.embedding("embed_tokens", t, s.vocab, h, split=tp)
    b.allreduce()
    b.group = "layers"
    for stack, n_blocks in (("encoder", s.layers), ("decoder", s.decoder_layers)):
        b.dropout(f"{stack}.embed_dropout", t * h)
        b.embedding(f"{stack}.relative_bias", seq * seq, 32, s.heads)
        b.ew(f"{stack}.bias_mask", "add", batch * s.heads * seq * seq, 2)
        b.in_block = True
        for sparse in (False, True):
            b.repeat = sum(1 for i in range(n_blocks) if s.sparse(i) == sparse)
            if not b.repeat:
                continue
            p = f"{stack}.{'sparse' if sparse else 'dense'}"
            b.rms_norm(p + ".attn_norm", t, h)
            _attention(b, s, p + ".attn", t, batch, seq, seq, tp, fused_qkv=False,
                       scale="none", mask="add")
            b.dropout(p + ".attn_dropout", t * h)
            b.ew(p + ".attn_residual", "add", t * h, 2)
            if stack == "decoder":
                b.rms_norm(p + ".cross_norm", t, h)
                _attention(b, s, p + ".cross", t, batch, seq, seq, tp, fused_qkv=False,
                           scale="none", mask="add")
                b.dropout(p + ".cross_dropout", t * h)
                b.ew(p + ".cross_residual", "add", t * h, 2)
            b.rms_norm(p + ".mlp_norm", t, h)
            if sparse:
                _moe(b, s, p + ".moe", t, batch, seq, tp)
            else:
                _mlp(b, s, p + ".mlp", t, tp)
            b.dropout(p + ".mlp_dropout", t * h)
            b.ew(p + ".mlp_residual", "add", t * h, 2)
        b.repeat, b.in_block = 1, False
        b.rms_norm(f"{stack}.final_norm", t, h)
        b.dropout(f"{stack}.final_dropout", t * h)
    b.group = "head"
    v = _vocab_split(s.vocab, tp)
    if s.tied_embeddings:
        b.ew("lm_head.rescale", "mulu", t * h)
    b.linear("lm_head", t, h, v, False, split=tp, shared=s.tied_embeddings)
    b.loss(t, v)


def build_step_graph(spec: ModelSpec, mode: str, seq_len: int, batch: int,
                     precision: str = "fp32", tp: int = 1, head: str | None = None,
                     accumulate_grads: bool = False, optimizer: str = "adam") -> StepGraph:
    """The kernels of one step of ``spec`` on one GPU (module docstring).

    Parameters
    ----------
    mode : {"train", "inference"}
        Training runs forward, backward and (``optimizer="adam"``) the optimizer step.
    seq_len, batch : int
        Tokens per sequence and sequences per GPU (the local batch).
    precision : {"fp32", "bf16"}
        Activation and weight width (BF16 keeps FP32 optimizer state).
    tp : int
        Tensor-parallel degree (must divide heads, key/value heads, FFN width, vocabulary).
    head : {"lm", "classification", "pretraining"}, optional
        BERT only: its masked-LM head (default), a pooler and two-class classifier, or both
        (``BertForPreTraining``; NeuSight measured training with it, inference with the
        classifier).
    """
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use one of {', '.join(MODES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    if seq_len < 1 or batch < 1:
        raise ValueError(f"seq_len and batch must be >= 1, got {seq_len} and {batch}")
    head = head or "lm"
    if head not in HEADS:
        raise ValueError(f"head {head!r}: use one of {', '.join(HEADS)}")
    bad = [f"{n} {v}" for n, v in (("heads", spec.heads), ("key/value heads", spec.kv_heads),
                                   ("FFN width", spec.ffn)) if v % tp]
    if tp < 1 or bad:
        raise ValueError(f"tensor-parallel degree {tp} must divide the model's "
                         f"{', '.join(bad) or 'dimensions'}; pick a divisor")
    b = KernelBuilder(DTYPE_BYTES[precision], mode == "train", accumulate_grads, tp)
    if spec.family == "switch":
        _switch(b, spec, batch, seq_len, tp)
    else:
        _decoder_only(b, spec, batch, seq_len, tp, head)
    if mode == "train" and optimizer == "adam":
        b.emit("adam", "elementwise", "optimizer", (max(1, int(b.local)),), 10.0 * b.local,
               ADAM_BYTES_PER_PARAM * b.local, "adam")
    params = dict(b.params)
    params["total"] = sum(params.values())
    params["local"] = b.local
    act = float(batch * seq_len * spec.hidden * DTYPE_BYTES[precision])
    ar = ((act, b.allreduce_fwd * (2 if mode == "train" else 1)),) if tp > 1 else ()
    return StepGraph(spec.name, mode, int(seq_len), int(batch), precision, int(tp),
                     tuple(merge_kernels(b.out)), params, ar, head, spec.hidden)


def merge_kernels(kernels: Iterable[Kernel]) -> list[Kernel]:
    """Identical kernels (same name, kind, phase, dims, op) merged into one with the summed
    count; the first one's order kept."""
    by: dict[tuple[Any, ...], Kernel] = {}
    for k in kernels:
        key = (k.name, k.kind, k.phase, k.dims, k.op)
        if key in by:
            old = by[key]
            by[key] = replace(old, count=old.count + k.count)
        else:
            by[key] = k
    return list(by.values())


def graph_summary(g: StepGraph) -> Mapping[str, Mapping[str, float]]:
    """Per phase and kind: kernel launches and FLOPs (for tables and tests)."""
    out: dict[str, dict[str, float]] = {}
    for k in g.kernels:
        row = out.setdefault(f"{k.phase}/{k.kind}", {"kernels": 0.0, "flops": 0.0})
        row["kernels"] += k.count
        row["flops"] += k.flops * k.count
    return out
