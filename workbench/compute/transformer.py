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

Memory of a step (:func:`step_memory_bytes`) follows Korthikanti et al., *Reducing
Activation Recomputation in Large Transformer Models* (MLSys 2023), eq. 1: a layer keeps
``s b h (34 + 5 a s / h)`` bytes of activations at 16-bit precision (``a`` heads, sequence
``s``, batch ``b``, hidden ``h``; twice at 32-bit), divided by the tensor-parallel degree;
training adds weights, gradients and Adam's two moments (16 bytes per parameter in FP32,
18 in mixed precision with FP32 master weights).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
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


def model_spec(cfg: Mapping[str, Any], name: str = "model") -> ModelSpec:
    """The :class:`ModelSpec` of a parsed Hugging Face config (``model_type`` decides).

    Raises :class:`ModelConfigError` naming an unknown ``model_type`` (with the known ones)
    or the missing key.
    """
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


def step_memory_bytes(s: ModelSpec, mode: str, seq_len: int, batch: int, precision: str,
                      params: float, tp: int = 1) -> float:
    """Device memory of one step on one GPU, bytes (module docstring)::

        training:  P/t * (16 fp32 | 18 bf16) + L * s b h (34 + 5 a s / h) * (2 fp32 | 1) / t
        inference: P/t * (4 | 2) + 2 * s b h * (4 | 2) + s b V * 4   (one layer live, logits)
    """
    p = float(params)
    b16 = precision == "bf16"
    h, a = s.hidden, s.heads
    if mode == "train":
        act = s.total_layers * seq_len * batch * h * (34 + 5 * a * seq_len / h)
        return p / tp * (18 if b16 else 16) + act * (1 if b16 else 2) / tp
    width = 2 if b16 else 4
    return (p / tp * width + 2 * seq_len * batch * h * width
            + seq_len * batch * s.vocab * 4 / tp)
