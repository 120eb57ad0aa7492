"""Transformer operator graphs: parameters, FLOPs against closed forms, NeuSight's opgraphs."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import pytest

from workbench.compute.opgraph import build_step_graph, graph_summary
from workbench.compute.transformer import (
    ModelConfigError,
    check_seq_len,
    load_model_config,
    model_spec,
    step_memory,
    step_memory_bytes,
)

GPT2_LARGE = {"model_type": "gpt2", "n_embd": 1280, "n_head": 20, "n_layer": 36,
              "vocab_size": 50257, "n_positions": 1024, "activation_function": "gelu_new"}
LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
             "num_key_value_heads": 32, "num_hidden_layers": 32, "intermediate_size": 11008,
             "vocab_size": 32000, "hidden_act": "silu"}
OPT_13 = {"model_type": "opt", "hidden_size": 2048, "num_attention_heads": 32,
          "num_hidden_layers": 24, "ffn_dim": 8192, "vocab_size": 50272,
          "max_position_embeddings": 2048, "word_embed_proj_dim": 2048}
BERT_LARGE = {"model_type": "bert", "hidden_size": 1024, "num_attention_heads": 16,
              "num_hidden_layers": 24, "intermediate_size": 4096, "vocab_size": 30522,
              "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu"}
SWITCH = {"model_type": "switch_transformers", "d_model": 1024, "d_kv": 128, "num_heads": 32,
          "d_ff": 16384, "num_layers": 24, "num_decoder_layers": 24, "num_experts": 4,
          "expert_capacity": 64, "encoder_sparse_step": 2, "vocab_size": 32128}


@pytest.mark.parametrize(("cfg", "params"), [
    (GPT2_LARGE, 774_030_080),  # Hugging Face gpt2-large
    (LLAMA2_7B, 6_738_415_616),  # meta-llama/Llama-2-7b-hf
    (OPT_13, 1_315_758_080),  # facebook/opt-1.3b
    (BERT_LARGE, 335_141_888),  # bert-large-uncased with its pooler (BertForPreTraining)
])
def test_parameter_counts_match_the_published_models(cfg: dict, params: int) -> None:
    head = "pretraining" if cfg["model_type"] == "bert" else None
    g = build_step_graph(model_spec(cfg, "m"), "inference", 128, 1, head=head)
    got = g.params["total"]
    if head:  # BertForPreTraining adds the MLM transform, its bias and the NSP head
        got -= 1024 * 1024 + 1024 + 2 * 1024 + 30522 + 1024 * 2 + 2
    assert got == pytest.approx(params, rel=1e-6)


@pytest.mark.parametrize("cfg", [GPT2_LARGE, LLAMA2_7B, OPT_13])
@pytest.mark.parametrize(("seq", "batch"), [(512, 1), (2048, 4)])
def test_training_gemm_flops_are_six_times_parameters_times_tokens(cfg: dict, seq: int,
                                                                    batch: int) -> None:
    """Linear layers: 2 (forward) + 4 (two backward GEMMs) FLOPs per weight per token;
    attention matmuls: 2 x 2 s h per token and layer forward, three times in training."""
    s = model_spec(cfg, "m")
    g = build_step_graph(s, "train", seq, batch)
    tokens = seq * batch
    linear_weights = sum(k.dims[2] * k.dims[3] * k.count  # K x N of every weight
                         for k in g.select("forward", "linear"))
    assert g.flops(kind="linear") == pytest.approx(6 * linear_weights * tokens, rel=1e-12)
    attention = 3 * 4 * s.layers * seq * s.heads * s.head_dim * tokens
    assert g.flops(kind="bmm") == pytest.approx(attention, rel=1e-12)
    # the classic closed form: about 6 x parameters x tokens (+ attention), within 3 %
    p = g.params["total"]
    assert g.flops(kind="linear") + g.flops(kind="bmm") == pytest.approx(
        6 * p * tokens + attention, rel=0.03)
    inf = build_step_graph(s, "inference", seq, batch)
    assert inf.flops(kind="linear") == pytest.approx(g.flops(kind="linear") / 3, rel=1e-12)
    assert not inf.select("backward") and not inf.select("optimizer")


def test_optimizer_and_backward_are_apart() -> None:
    g = build_step_graph(model_spec(GPT2_LARGE, "m"), "train", 1024, 1)
    (adam,) = g.select("optimizer")
    assert adam.bytes == 28 * g.params["total"]  # weight, grad, m, v read; three written
    summary = graph_summary(g)
    assert summary["backward/linear"]["kernels"] == 2 * summary["forward/linear"]["kernels"]
    assert summary["backward/bmm"]["flops"] == 2 * summary["forward/bmm"]["flops"]


def test_grouped_query_attention_shrinks_k_and_v() -> None:
    gqa = build_step_graph(model_spec({**LLAMA2_7B, "num_key_value_heads": 8}, "m"),
                           "inference", 256, 1)
    full = build_step_graph(model_spec(LLAMA2_7B, "m"), "inference", 256, 1)
    k = {x.name: x for x in gqa.kernels}
    assert k["layer.attn.k"].dims == (1, 256, 8 * 128, 4096)
    assert gqa.params["total"] == pytest.approx(full.params["total"] - 32 * 2 * 4096 * 3072)
    assert "layer.attn.repeat_k" in k


def test_switch_experts_take_at_most_their_capacity() -> None:
    s = model_spec(SWITCH, "switch")
    g = build_step_graph(s, "inference", 512, 2)
    experts = [k for k in g.select("forward", "linear") if ".expert" in k.name]
    assert {k.dims[1] for k in experts} == {2 * 64}  # 64 tokens of each sequence
    assert sum(k.count for k in experts) == 2 * 4 * (12 + 12)  # wi, wo x experts x sparse
    routers = [k for k in g.select("forward", "linear") if k.name.endswith(".router")]
    assert sum(k.count for k in routers) == 24


def test_tensor_parallel_splits_heads_and_adds_allreduces() -> None:
    s = model_spec(GPT2_LARGE, "m")
    one = build_step_graph(s, "train", 1024, 4)
    four = build_step_graph(s, "train", 1024, 4, tp=4)
    assert four.flops(kind="bmm") == pytest.approx(one.flops(kind="bmm") / 4)
    assert four.params["local"] < one.params["local"] / 3
    ((nbytes, count),) = four.tp_allreduces
    assert nbytes == 4 * 1024 * 1280 * 4 and count == 2 * (2 * 36 + 1)
    with pytest.raises(ValueError, match="must divide the model's heads 20"):
        build_step_graph(s, "train", 1024, 4, tp=8)


@pytest.mark.parametrize(("cfg", "match"), [
    ({"model_type": "mamba"}, "model_type 'mamba' is not supported; use one of"),
    ({k: v for k, v in GPT2_LARGE.items() if k != "n_head"}, "lacks 'n_head' or"),
    ({**GPT2_LARGE, "n_layer": 0}, "n_layer = 0 must be a whole number >= 1"),
    ({**GPT2_LARGE, "activation_function": "swiglu7"}, "activation 'swiglu7'"),
    ({**LLAMA2_7B, "num_key_value_heads": 5}, "not a multiple of num_key_value_heads"),
])
def test_bad_model_configs_name_the_fix(cfg: dict, match: str) -> None:
    with pytest.raises(ModelConfigError, match=match):
        model_spec(cfg, "cfg")


def test_bad_config_files(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="not found"):
        load_model_config(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        load_model_config(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="seq_len and batch must be >= 1"):
        build_step_graph(model_spec(GPT2_LARGE, "m"), "train", 0, 1)


def test_memory_grows_with_batch_and_shrinks_with_tp() -> None:
    s = model_spec(GPT2_LARGE, "m")
    p = 774e6
    one = step_memory_bytes(s, "train", 1024, 1, "fp32", p)
    sbh, v = 1024 * 1280, 50257
    # 16 B/param; 34 s b h per layer at 16 bits, doubled in FP32; no score matrices; logits
    # s b V in FP32 plus their FP32 copy and log-softmax
    assert one == pytest.approx(16 * p + 36 * sbh * 34 * 2 + 1024 * v * (4 + 8))
    assert step_memory_bytes(s, "train", 1024, 8, "fp32", p) > one
    assert step_memory_bytes(s, "train", 1024, 1, "fp32", p, tp=4) < one / 3


GPT3_XL = {"model_type": "gpt2", "n_embd": 2048, "n_head": 16, "n_layer": 24,
           "vocab_size": 50257, "n_positions": 2048}


def test_memory_budgets_by_hand() -> None:
    s = model_spec(GPT3_XL, "xl")
    p = build_step_graph(s, "inference", 1, 1).params["total"]
    assert 1.3e9 < p < 1.35e9
    seq, h, layers, v, a = 2048, 2048, 24, 50257, 16
    sbh, logits = seq * h, seq * v
    m = step_memory(s, "train", seq, 1, "bf16", p)
    # FP32 weights + gradients + Adam = 16 B/param = 21 GB; autocast's BF16 weight copies
    assert (m.weights, m.gradients, m.optimizer) == pytest.approx((4 * p, 4 * p, 8 * p))
    assert 20.8e9 < m.weights + m.gradients + m.optimizer < 21.6e9
    assert m.weight_copies == pytest.approx(2 * p)
    assert m.activations == pytest.approx(layers * sbh * 34 + logits * (2 + 8))
    eager = step_memory(dataclasses.replace(s, eager_attention=True), "train", seq, 1, "bf16",
                        p)
    assert eager.activations - m.activations == pytest.approx(layers * 5 * a * seq * seq)
    ck = step_memory(s, "train", seq, 1, "bf16", p, checkpointing=True)
    assert ck.activations == pytest.approx(layers * sbh * 2 + sbh * 34 + logits * 10)
    # ZeRO over 8 GPUs: optimizer states (1), and gradients (2), and weights (3)
    z = [step_memory(s, "train", seq, 1, "bf16", p, dp=8, zero=k) for k in (1, 2, 3)]
    assert [x.weights + x.gradients + x.optimizer for x in z] == pytest.approx(
        [(4 + 4 + 1) * p, (4 + 0.5 + 1) * p, 2 * p])
    assert step_memory(s, "train", seq, 1, "bf16", p, dp=8).optimizer == 8 * p  # no ZeRO
    # tensor parallel over 4: Korthikanti's 10 + 24 / t without sequence parallelism, 34 / t
    t4 = step_memory(s, "train", seq, 1, "bf16", p, 4)
    sp = step_memory(s, "train", seq, 1, "bf16", p, 4, sequence_parallel=True)
    assert t4.activations == pytest.approx(layers * sbh * 16 + logits * 10 / 4)
    assert sp.activations == pytest.approx(layers * sbh * 8.5 + logits * 10 / 4)
    assert t4.weights == pytest.approx(p)
    # 1F1B over 4 stages with 8 micro-batches: the first stage holds 4 of them, 6 layers each
    pp = step_memory(s, "train", seq, 1, "bf16", p, pp=4, in_flight=4)
    assert pp.activations == pytest.approx(max(4 * 6 * sbh * 34, 6 * sbh * 34 + logits * 10))
    assert pp.weights == pytest.approx(p)
    inf = step_memory(s, "inference", seq, 1, "bf16", p)
    assert inf.total == pytest.approx(2 * p + 2 * sbh * 2 + logits * 4)
    with pytest.raises(ValueError, match="--zero 4"):
        step_memory(s, "train", seq, 1, "bf16", p, zero=4)


def test_sequence_limits_and_eager_attention_come_from_the_config() -> None:
    assert model_spec(GPT2_LARGE, "g").max_positions == 1024
    assert model_spec(OPT_13, "o").max_positions == 2048
    assert model_spec(BERT_LARGE, "b").max_positions == 512
    assert model_spec(LLAMA2_7B, "l").max_positions == 0
    assert model_spec({**LLAMA2_7B, "max_position_embeddings": 4096}, "l").max_positions == 4096
    assert model_spec({**GPT2_LARGE, "_attn_implementation": "eager"}, "g").eager_attention
    assert not model_spec(GPT2_LARGE, "g").eager_attention
    check_seq_len(model_spec(GPT2_LARGE, "g"), 1024)
    with pytest.raises(ValueError, match=r"^--seq-len 2048 exceeds g's n_positions 1024 .*; "
                       r"use --seq-len 1024 or less$"):
        check_seq_len(model_spec(GPT2_LARGE, "g"), 2048)


# --------------------------------------------------------------------------- NeuSight

OPGRAPHS = ["gpt2_large-train-1024-4", "bert_large-train-512-2", "opt_13-train-2048-1",
            "gpt3_xl-inf-2048-8", "gpt3_27-train-2048-2", "bert_large-inf-512-8",
            "gpt2_large-train-1024-4-tp4"]


def _compare(shared_data: Path, name: str) -> tuple[object, object]:
    from workbench.compute import neusight as ns

    model, mode, seq, batch = name.split("-")[:4]
    cfg = json.loads((shared_data / "profiles/neusight/model_configs" / f"{model}.json")
                     .read_text())
    spec = model_spec(cfg, model)
    one_block = dataclasses.replace(spec, layers=1)  # NeuSight lists one block
    head = None
    if spec.family == "bert":
        head = "pretraining" if mode == "train" else "classification"
    g = build_step_graph(one_block, "train" if mode == "train" else "inference", int(seq),
                         int(batch), tp=4 if name.endswith("tp4") else 1, head=head)
    og = ns.read_opgraph(shared_data / "profiles/neusight/opgraphs" / f"{name}.csv.gz")
    return g, og


@pytest.mark.shared_data
@pytest.mark.parametrize("name", OPGRAPHS)
def test_graphs_match_neusights_opgraphs(shared_data: Path, name: str) -> None:
    """Operator counts and FLOPs per kind against NeuSight's device-independent graphs:
    every GEMM and batched matmul with its shape, forward and backward; softmax and norms
    forward (NeuSight has no loss; it writes a norm's backward as a multiply)."""
    g, og = _compare(shared_data, name)
    for phase in ("forward", "backward"):
        for kind in ("linear", "bmm"):
            mine: collections.Counter[tuple[int, ...]] = collections.Counter()
            for k in g.select(phase, kind):
                mine[k.dims] += k.count
            theirs = collections.Counter(og[(og.phase == phase) & (og.kind == kind)]["dims"])
            if name.endswith("tp4"):  # NeuSight floors the vocabulary split, Megatron pads
                assert sum(mine.values()) == sum(theirs.values())
                assert g.flops(phase, kind) == pytest.approx(
                    og[(og.phase == phase) & (og.kind == kind)]["flops"].sum(), rel=1e-3)
            else:
                assert mine == theirs, (phase, kind)
    for kind in ("softmax", "ln"):
        mine_n = sum(k.count for k in g.select("forward", kind)
                     if not k.name.startswith("loss.") and not k.name.endswith(".mean"))
        assert mine_n == int(((og.phase == "forward") & (og.kind == kind)).sum()), kind


@pytest.mark.slow
@pytest.mark.shared_data
def test_switch_graph_matches_neusight_in_gemm_flops(shared_data: Path) -> None:
    from workbench.compute import neusight as ns

    cfg = json.loads((shared_data / "profiles/neusight/model_configs/switchxl4.json")
                     .read_text())
    g = build_step_graph(model_spec(cfg, "switchxl4"), "inference", 512, 1)
    og = ns.read_opgraph(shared_data / "profiles/neusight/opgraphs/switchxl4-inf-512-1.csv.gz")
    theirs = og[og.kind.isin(["linear", "bmm"]) & (og.phase == "forward")]
    mine = g.flops("forward", "linear") + g.flops("forward", "bmm")
    assert mine == pytest.approx(theirs["flops"].sum(), rel=1e-3)
    assert g.kernel_count("forward", "linear") + g.kernel_count("forward", "bmm") == len(theirs)
