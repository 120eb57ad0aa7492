"""Transformer models from a Hugging Face ``config.json``: architecture, parameters, memory.

``model_type`` decides the family, and each family reads its own keys:

==================== ===================================================================
``gpt2``             GPT-2 and GPT-3 (``n_embd``, ``n_head``, ``n_layer``, ``vocab_size``;
                     ``n_inner`` default ``4 n_embd``; ``activation_function``)
``opt``              OPT (``hidden_size``, ``num_attention_heads``, ``num_hidden_layers``,
                     ``ffn_dim``, ``vocab_size``; ``word_embed_proj_dim``)
``bert``             BERT (``hidden_size``, ``num_attention_heads``, ``num_hidden_layers``,
                     ``intermediate_size``, ``vocab_size``; ``type_vocab_size``)
``llama``            Llama 1/2/3 and Mistral-like (``hidden_size``, ``num_attention_heads``,
                     ``num_hidden_layers``, ``intermediate_size``, ``vocab_size``;
                     ``num_key_value_heads`` for grouped-query attention; RMS norm, SwiGLU)
``switch_transformers`` Switch Transformer (``d_model``, ``d_kv``, ``num_heads``, ``d_ff``,
                     ``num_layers``, ``num_decoder_layers``, ``num_experts``,
                     ``expert_capacity``, ``encoder_sparse_step``, ``decoder_sparse_step``)
==================== ===================================================================

``mistral`` and ``qwen2`` read as ``llama``. The operator graph of a step is built by
:mod:`workbench.compute.opgraph`.

Memory of a step (:func:`step_memory`) as PyTorch runs it, per GPU:

* **model states** under mixed precision as ``torch.autocast`` runs it (and in FP32): FP32
  weights (4 bytes per parameter), FP32 gradients (4) and Adam's two FP32 moments (8): 16
  bytes per parameter, divided by the tensor- and pipeline-parallel degrees; ZeRO
  (Rajbhandari et al., SC 2020) / FSDP shards the optimizer states (stage 1), the
  gradients too (2) and the weights too (3) over the data-parallel degree. In BF16 autocast
  keeps a 16-bit copy of each weight it casts for the backward pass (2 bytes per local
  parameter, ``weight_copies``).
* **activations** after Korthikanti et al., *Reducing Activation Recomputation in Large
  Transformer Models* (MLSys 2023), eqs. 1-2: a layer keeps ``s b h (10 + 24 / t)`` 16-bit
  bytes under ``t``-way tensor parallelism (``34 / t`` with sequence parallelism), twice
  that in FP32; the ``5 a s^2 b / t`` bytes of attention scores, softmax and dropout mask
  only with eager attention (``"_attn_implementation": "eager"`` or ``attn_implementation``
  in the config): PyTorch >= 2.0 runs ``scaled_dot_product_attention`` with its
  memory-efficient or flash kernel, which keeps no score matrix. Activation checkpointing
  (full recomputation per layer) keeps each layer's ``s b h`` input and one layer's full
  activations. The LM head's logits, their FP32 copy and the log-softmax of the loss add
  ``s b V (w + 8) / t`` bytes. A 1F1B pipeline stage holds ``min(m, p)`` micro-batches of
  its ``L / p`` layers.
* inference: the weights at the arithmetic's width, two layers' ``s b h`` live, the logits
  in FP32 (and one layer's scores with eager attention).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

FAMILIES: Mapping[str, str] = {"gpt2": "gpt2", "opt": "opt", "bert": "bert", "llama": "llama",
                               "mistral": "llama", "qwen2": "llama",
                               "switch_transformers": "switch"}
"""``model_type`` -> family the graph builder knows."""

MODES = ("train", "inference")
PRECISIONS = ("fp32", "bf16")


class ModelConfigError(ValueError):
    """A model config cannot be read; the message names the key or value to fix."""


@dataclass(frozen=True)
class ModelSpec:
    """The architecture a graph is built from (one decoder or encoder stack; Switch adds a
    decoder stack).

    Attributes
    ----------
    name : str
        Config file stem or ``_name_or_path``.
    family : str
        One of the values of :data:`FAMILIES`.
    layers : int
        Transformer blocks (Switch: encoder blocks).
    hidden : int
        Model width ``h``.
    heads : int
        Attention heads.
    kv_heads : int
        Key/value heads (grouped-query attention; ``heads`` when not grouped).
    head_dim : int
        Width of one head (``hidden / heads`` except in Switch/T5).
    ffn : int
        Feed-forward inner width.
    vocab : int
        Vocabulary size.
    activation : str
        ``gelu``, ``gelu_new`` (tanh form, 8 element-wise kernels in HF eager), ``relu``,
        ``silu``.
    decoder_layers : int
        Switch decoder blocks (0 for decoder-only and encoder-only models).
    experts : int
        Experts per sparse layer (0: dense).
    expert_capacity : int
        Tokens an expert takes per sequence (Switch's ``expert_capacity``).
    sparse_step : int
        Every ``sparse_step``-th block is sparse (Switch).
    embed_proj : int
        OPT's ``word_embed_proj_dim`` when it differs from ``hidden`` (else 0).
    type_vocab : int
        BERT token-type vocabulary.
    tied_embeddings : bool
        The LM head shares the token embedding.
    positions : int
        Rows of a learned position-embedding table (0: none; rotary or relative).
    max_positions : int
        The longest sequence the config allows (``n_positions``,
        ``max_position_embeddings``; 0: no limit, relative positions).
    eager_attention : bool
        The config asks for eager attention (``_attn_implementation`` or
        ``attn_implementation`` ``"eager"``): the score matrices are materialised.
    """

    name: str
    family: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    activation: str
    decoder_layers: int = 0
    experts: int = 0
    expert_capacity: int = 0
    sparse_step: int = 0
    embed_proj: int = 0
    type_vocab: int = 0
    tied_embeddings: bool = True
    positions: int = 0
    max_positions: int = 0
    eager_attention: bool = False

    @property
    def total_layers(self) -> int:
        """Encoder plus decoder blocks."""
        return self.layers + self.decoder_layers

    def sparse(self, block: int) -> bool:
        """Block ``block`` (0-based within its stack) is a mixture-of-experts block."""
        return self.experts > 0 and self.sparse_step > 0 and block % self.sparse_step == (
            self.sparse_step - 1)


MAX_DIMENSION = 10**9
"""Largest size a model config may give (layers, widths, vocabulary, positions): far above
any model built, below what overflows the memory and FLOP counts."""


def _int(cfg: Mapping[str, Any], where: str, *keys: str, default: int | None = None) -> int:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if (isinstance(v, bool) or not isinstance(v, int | float)
                    or not math.isfinite(v) or v != int(v) or not 1 <= v <= MAX_DIMENSION):
                raise ModelConfigError(f"{where}: {k} = {v!r} must be a whole number >= 1 "
                                       f"and <= {MAX_DIMENSION:.0e}")
            return int(v)
    if default is not None:
        return default
    raise ModelConfigError(f"{where} lacks {' or '.join(repr(k) for k in keys)}; add it "
                           "(a Hugging Face config.json of this model_type has it)")


_LIMIT_KEYS: Mapping[str, tuple[str, ...]] = {
    "gpt2": ("n_positions", "n_ctx"), "opt": ("max_position_embeddings",),
    "bert": ("max_position_embeddings",), "llama": ("max_position_embeddings",),
    "switch": ()}
_LIMIT_DEFAULTS: Mapping[str, int] = {"gpt2": 1024, "opt": 2048, "bert": 512}
"""The config keys of the longest sequence, and Hugging Face's defaults where absent."""


def model_spec(cfg: Mapping[str, Any], name: str = "model") -> ModelSpec:
    """The :class:`ModelSpec` of a parsed Hugging Face config (``model_type`` decides).

    Raises :class:`ModelConfigError` naming an unknown ``model_type`` (with the known ones)
    or the missing key.
    """
    spec = _family_spec(cfg, name)
    w = f"{name} ({cfg.get('model_type')})"
    keys = _LIMIT_KEYS[spec.family]
    limit = (_int(cfg, w, *keys, default=_LIMIT_DEFAULTS.get(spec.family, 0)) if keys else 0)
    eager = any(str(cfg.get(k, "")).lower() == "eager"
                for k in ("_attn_implementation", "attn_implementation"))
    return replace(spec, max_positions=limit, eager_attention=eager)


def limit_key(spec: ModelSpec) -> str:
    """The config key that bounds the sequence length (``n_positions`` for GPT-2/3)."""
    keys = _LIMIT_KEYS.get(spec.family, ())
    return keys[0] if keys else ""


def check_seq_len(spec: ModelSpec, seq_len: int, flag: str = "--seq-len") -> None:
    """Raise ``ValueError`` (one line naming the config's limit) when ``seq_len`` exceeds
    the longest sequence ``spec`` allows."""
    if spec.max_positions and seq_len > spec.max_positions:
        raise ValueError(f"{flag} {seq_len} exceeds {spec.name}'s {limit_key(spec)} "
                         f"{spec.max_positions} (the longest sequence the model takes); use "
                         f"{flag} {spec.max_positions} or less")


def _family_spec(cfg: Mapping[str, Any], name: str) -> ModelSpec:
    if not isinstance(cfg, Mapping):
        raise ModelConfigError(f"{name}: a model config is one JSON object")
    mt = cfg.get("model_type")
    if mt not in FAMILIES:
        raise ModelConfigError(f"{name}: model_type {mt!r} is not supported; use one of "
                               f"{', '.join(sorted(FAMILIES))}")
    fam = FAMILIES[str(mt)]
    w = f"{name} ({mt})"
    if fam == "gpt2":
        h = _int(cfg, w, "n_embd", "hidden_size")
        heads = _int(cfg, w, "n_head", "num_attention_heads")
        return _checked(ModelSpec(
            name, fam, _int(cfg, w, "n_layer", "num_hidden_layers"), h, heads, heads,
            h // heads, _int(cfg, w, "n_inner", default=4 * h), _int(cfg, w, "vocab_size"),
            str(cfg.get("activation_function", "gelu_new")),
            positions=_int(cfg, w, "n_positions", "n_ctx", default=1024)), w)
    if fam == "opt":
        h = _int(cfg, w, "hidden_size")
        heads = _int(cfg, w, "num_attention_heads")
        proj = _int(cfg, w, "word_embed_proj_dim", default=h)
        return _checked(ModelSpec(
            name, fam, _int(cfg, w, "num_hidden_layers"), h, heads, heads, h // heads,
            _int(cfg, w, "ffn_dim"), _int(cfg, w, "vocab_size"),
            str(cfg.get("activation_function", "relu")), embed_proj=0 if proj == h else proj,
            positions=_int(cfg, w, "max_position_embeddings", default=2048) + 2), w)
    if fam == "bert":
        h = _int(cfg, w, "hidden_size")
        heads = _int(cfg, w, "num_attention_heads")
        return _checked(ModelSpec(
            name, fam, _int(cfg, w, "num_hidden_layers"), h, heads, heads, h // heads,
            _int(cfg, w, "intermediate_size"), _int(cfg, w, "vocab_size"),
            str(cfg.get("hidden_act", "gelu")),
            type_vocab=_int(cfg, w, "type_vocab_size", default=2),
            positions=_int(cfg, w, "max_position_embeddings", default=512)), w)
    if fam == "llama":
        h = _int(cfg, w, "hidden_size")
        heads = _int(cfg, w, "num_attention_heads")
        return _checked(ModelSpec(
            name, fam, _int(cfg, w, "num_hidden_layers"), h, heads,
            _int(cfg, w, "num_key_value_heads", default=heads),
            _int(cfg, w, "head_dim", default=h // heads), _int(cfg, w, "intermediate_size"),
            _int(cfg, w, "vocab_size"), str(cfg.get("hidden_act", "silu")),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False))), w)
    # switch
    layers = _int(cfg, w, "num_layers")
    return _checked(ModelSpec(
        name, fam, layers, _int(cfg, w, "d_model"), _int(cfg, w, "num_heads"),
        _int(cfg, w, "num_heads"), _int(cfg, w, "d_kv"), _int(cfg, w, "d_ff"),
        _int(cfg, w, "vocab_size"), str(cfg.get("dense_act_fn", "relu")),
        decoder_layers=_int(cfg, w, "num_decoder_layers", default=layers),
        experts=_int(cfg, w, "num_experts"), expert_capacity=_int(cfg, w, "expert_capacity"),
        sparse_step=_int(cfg, w, "encoder_sparse_step", default=2),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True))), w)


_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh")


def _checked(spec: ModelSpec, where: str) -> ModelSpec:
    if spec.activation not in _ACTIVATIONS:
        raise ModelConfigError(f"{where}: activation {spec.activation!r} is not one of "
                               f"{', '.join(_ACTIVATIONS)}")
    if spec.family != "switch" and spec.hidden % spec.heads:
        raise ModelConfigError(f"{where}: hidden size {spec.hidden} is not a multiple of "
                               f"the {spec.heads} heads")
    if spec.heads % spec.kv_heads:
        raise ModelConfigError(f"{where}: {spec.heads} heads are not a multiple of "
                               f"num_key_value_heads {spec.kv_heads}")
    return spec


def load_model_config(path: str | Path) -> ModelSpec:
    """:func:`model_spec` of a ``config.json`` file (named by its stem)."""
    p = Path(path)
    if p.is_dir():
        raise ModelConfigError(f"model config {p} is a folder; pass the config.json in it")
    if not p.is_file():
        raise ModelConfigError(f"model config {p} not found; pass a Hugging Face "
                               "config.json")
    try:
        cfg = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"{p} is not valid JSON ({exc}); pass a Hugging Face "
                               "config.json") from None
    return model_spec(cfg, p.stem)


# --------------------------------------------------------------------------- memory

DTYPE_BYTES: Mapping[str, int] = {"fp32": 4, "bf16": 2}


STATE_BYTES: Mapping[str, float] = {"weights": 4.0, "gradients": 4.0, "optimizer": 8.0}
"""Bytes per parameter of the training states (FP32 weights, gradients, Adam's two
moments), in FP32 and in mixed precision alike."""
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class StepMemory:
    """One GPU's memory in one step by part, bytes (module docstring)."""

    weights: float
    gradients: float
    optimizer: float
    weight_copies: float
    activations: float

    @property
    def states(self) -> float:
        """Everything but the activations: what a smaller batch cannot shrink."""
        return self.weights + self.gradients + self.optimizer + self.weight_copies

    @property
    def total(self) -> float:
        return self.states + self.activations

    def parts_gb(self) -> dict[str, float]:
        """The parts in GB (``predict --json``'s ``memory_parts_gb``)."""
        return {k: getattr(self, k) / 1e9 for k in ("weights", "gradients", "optimizer",
                                                     "weight_copies", "activations")}


def step_memory(s: ModelSpec, mode: str, seq_len: int, batch: int, precision: str,
                params: float, tp: int = 1, *, pp: int = 1, dp: int = 1, zero: int = 0,
                checkpointing: bool = False, sequence_parallel: bool = False,
                in_flight: int = 1) -> StepMemory:
    """One GPU's memory at ``batch`` sequences per (micro-)batch (module docstring).

    ``tp``, ``pp``, ``dp``: tensor-, pipeline- and data-parallel degrees; ``zero``: the
    ZeRO stage sharding over ``dp``; ``in_flight``: micro-batches a pipeline stage holds.
    """
    if zero not in ZERO_STAGES:
        raise ValueError(f"--zero {zero}: use 0, 1, 2 or 3")
    w = DTYPE_BYTES[precision]
    h, a, t = s.hidden, s.heads, max(int(tp), 1)
    p_local = float(params) / t / max(int(pp), 1)
    sbh = float(seq_len) * batch * h
    scores = 5.0 * a * float(seq_len) ** 2 * batch / t * (w / 2) if s.eager_attention else 0.0
    logits = float(seq_len) * batch * s.vocab / t
    if mode != "train":
        return StepMemory(p_local * w, 0.0, 0.0, 0.0,
                          2 * sbh * w + logits * 4 + (scores if s.eager_attention else 0.0))
    d = max(int(dp), 1) if zero else 1
    shard = {"optimizer": d if zero >= 1 else 1, "gradients": d if zero >= 2 else 1,
             "weights": d if zero >= 3 else 1}
    st = {k: p_local * STATE_BYTES[k] / shard[k] for k in STATE_BYTES}
    copies = p_local * 2.0 / shard["weights"] if precision == "bf16" else 0.0
    per_layer = sbh * ((34.0 / t) if sequence_parallel or t == 1 else (10.0 + 24.0 / t)) * (
        w / 2) + scores
    stage_layers = s.total_layers / max(int(pp), 1)
    kept = (sbh * w / (t if sequence_parallel else 1)) if checkpointing else per_layer
    recompute = per_layer if checkpointing else 0.0
    head = logits * (w + 8)
    if pp <= 1:
        act = stage_layers * kept + recompute + head
    else:  # 1F1B: the first stage holds the most micro-batches, the last the logits
        act = max(max(int(in_flight), 1) * stage_layers * kept, stage_layers * kept + head
                  ) + recompute
    return StepMemory(st["weights"], st["gradients"], st["optimizer"], copies, act)


def step_memory_bytes(s: ModelSpec, mode: str, seq_len: int, batch: int, precision: str,
                      params: float, tp: int = 1) -> float:
    """:func:`step_memory` ``.total`` of one GPU without pipeline or data parallelism."""
    return step_memory(s, mode, seq_len, batch, precision, params, tp).total
