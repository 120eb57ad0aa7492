"""LLM jobs: a transformer job defined by its model config, and what the planner needs of it.

A job is a Hugging Face ``config.json`` plus sequence length, global batch (sequences),
tokens (or steps) to run, precision and purpose (pre-training or fine-tuning)
(:class:`LlmJobSpec`). The step-time predictor (:func:`predict_from_config`) gives its step
on any device; :func:`workbench.profiles.predict_llm_profile` turns that into the planner's
:class:`~workbench.perf.JobProfile` on a GPU type.

**Statistical efficiency** uses the critical batch size of Kaplan et al., *Scaling Laws for
Neural Language Models* (2020), eqs. 1.4 and 1.6, with McCandlish et al., *An Empirical
Model of Large-Batch Training* (2018), for whom the critical batch is the gradient noise
scale ``B_noise`` that Pollux's efficiency ``E(m) = (phi + m0) / (phi + m)`` reads::

    L(N, D) = ((N_c / N)^(alpha_N / alpha_D) + D_c / D)^alpha_D      loss, nats per token
    B_crit(L) = B_* / L^(1 / alpha_B)                                  tokens
    phi = B_crit / s                                                   sequences

with ``N`` the non-embedding parameters, ``D`` the tokens seen (the job's progress times
its tokens, plus the pre-training tokens of a fine-tune), ``N_c = 8.8e13``,
``D_c = 5.4e13``, ``alpha_N = 0.076``, ``alpha_D = 0.095``, ``B_* = 2e8`` tokens,
``alpha_B = 0.21`` (Kaplan et al., section 1.2). The loss falls as training proceeds, so
``phi`` grows and larger batches lose less: the same drift the Pollux apps' measured
``phi`` shows. A fine-tune starts from the pre-trained model's loss (``pretrained_tokens``,
default 300 B, GPT-3's count), so its ``phi`` is already large: an assumption, since the
loss on the fine-tuning data is not the pre-training loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.compute.devices import DeviceSpec
from workbench.compute.kernels import KernelModel, read_kernel_model
from workbench.compute.step import (
    StepOptions,
    StepTerms,
    TransformerStep,
    predict_transformer,
    read_step_terms,
)
from workbench.compute.transformer import ModelSpec, load_model_config

KAPLAN = {"N_c": 8.8e13, "D_c": 5.4e13, "alpha_N": 0.076, "alpha_D": 0.095, "B_star": 2e8,
          "alpha_B": 0.21}
"""Kaplan et al. (2020) fits, section 1.2 (loss in nats, tokens, non-embedding parameters)."""

PURPOSES = ("pretrain", "finetune")
DEFAULT_PRETRAINED_TOKENS = 300e9
"""Tokens a fine-tuned model saw before (GPT-3's 300 B; Brown et al. 2020)."""


@dataclass(frozen=True)
class Predictor:
    """The kernel model and step terms one set of predictions uses."""

    kernels: KernelModel
    terms: StepTerms


def load_predictor(kernels_path: Path | str | None = None,
                   terms_path: Path | str | None = None) -> Predictor:
    """The shipped kernel model and step terms (``workbench/data/compute``)."""
    return Predictor(read_kernel_model(kernels_path), read_step_terms(terms_path))


def predict_from_config(config: Path | str | ModelSpec, mode: str, seq_len: int, batch: int,
                        dev: DeviceSpec, gpus: int = 1, parallel: str = "dp",
                        precision: str = "fp32", predictor: Predictor | None = None,
                        nodes: int = 1, options: StepOptions | None = None
                        ) -> TransformerStep:
    """Predicted step of a model config on ``gpus`` x ``dev`` (see
    :func:`workbench.compute.step.predict_transformer`; ``options``: ZeRO, activation
    checkpointing, sequence parallelism, pipeline micro-batches)."""
    spec = config if isinstance(config, ModelSpec) else load_model_config(config)
    p = predictor or load_predictor()
    return predict_transformer(spec, mode, seq_len, batch, dev, p.kernels, p.terms, gpus,
                               parallel, precision, nodes=nodes, options=options)


# --------------------------------------------------------------------------- efficiency


def kaplan_loss(non_embedding_params: float, tokens: float) -> float:
    """``L(N, D)`` of the module docstring, nats per token."""
    k = KAPLAN
    d = max(float(tokens), 1e6)
    return float(((k["N_c"] / non_embedding_params) ** (k["alpha_N"] / k["alpha_D"])
                  + k["D_c"] / d) ** k["alpha_D"])


def critical_batch_tokens(loss: float) -> float:
    """``B_crit(L) = B_* / L^(1 / alpha_B)``, tokens."""
    return float(KAPLAN["B_star"] / loss ** (1.0 / KAPLAN["alpha_B"]))


def noise_scale_trajectory(non_embedding_params: float, seq_len: int, job_tokens: float,
                           tokens_before: float = 0.0, knots: int = 16
                           ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``phi`` (sequences) at ``knots`` points of progress in [0, 1]: ``B_crit(L(N, D)) / s``
    with ``D = tokens_before + progress * job_tokens``."""
    prog = np.linspace(0.0, 1.0, knots)
    phi = [critical_batch_tokens(kaplan_loss(non_embedding_params,
                                             tokens_before + p * job_tokens)) / seq_len
           for p in prog]
    return tuple(float(p) for p in prog), tuple(float(v) for v in phi)


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class LlmJobSpec:
    """An LLM training job as the operator defines it.

    Attributes
    ----------
    name : str
        The profile's application name (``llm:<job id>`` in scenarios).
    model_config : Path
        Hugging Face ``config.json``.
    seq_len : int
        Tokens per sequence.
    global_batch : int
        Sequences per optimizer step (the reference batch ``m0`` of its efficiency).
    tokens : float
        Tokens to train on (``steps x global_batch x seq_len`` when given as steps).
    precision : str
        ``fp32`` or ``bf16``.
    purpose : str
        ``pretrain`` or ``finetune``.
    pretrained_tokens : float
        Tokens the model saw before a fine-tune (0 for pre-training).
    activation_checkpointing : bool
        Recompute each block in the backward pass (less memory, a longer step).
    zero : int
        ZeRO/FSDP stage over the replicas of a node (0: none; the job then runs on whole
        nodes).
    """

    name: str
    model_config: Path
    seq_len: int
    global_batch: int
    tokens: float
    precision: str = "bf16"
    purpose: str = "pretrain"
    pretrained_tokens: float = 0.0
    activation_checkpointing: bool = False
    zero: int = 0

    def __post_init__(self) -> None:
        where = f"LLM job {self.name!r}"
        if self.seq_len < 1 or self.global_batch < 1:
            raise ValueError(f"{where}: seq_len and global_batch must be >= 1")
        if not (self.tokens > 0 and math.isfinite(self.tokens)):
            raise ValueError(f"{where}: tokens (or steps) must be positive")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"{where}: precision {self.precision!r}: use fp32 or bf16")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"{where}: zero {self.zero!r}: use 0, 1, 2 or 3")
        if self.purpose not in PURPOSES:
            raise ValueError(f"{where}: purpose {self.purpose!r}: use pretrain or finetune")

    @property
    def work_samples(self) -> float:
        """Sequences to process: ``tokens / seq_len``."""
        return self.tokens / self.seq_len

    @property
    def tokens_before(self) -> float:
        """Tokens seen before the job (the pre-training of a fine-tune)."""
        if self.purpose == "finetune":
            return self.pretrained_tokens or DEFAULT_PRETRAINED_TOKENS
        return 0.0
