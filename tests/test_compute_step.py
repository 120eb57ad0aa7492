"""From kernels to a step: launch terms, phases, parallelism, memory, the CLI contract."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workbench.cli import main
from workbench.compute.devices import BUILTIN_DEVICES
from workbench.compute.kernels import ROOFLINE_KERNELS
from workbench.compute.llm import load_predictor, predict_from_config
from workbench.compute.opgraph import build_step_graph
from workbench.compute.step import (
    DeviceMemoryError,
    KernelTimes,
    StepOptions,
    StepTerms,
    assemble_step,
    kernel_times,
)
from workbench.compute.transformer import model_spec

GPT2_LARGE = {"model_type": "gpt2", "n_embd": 1280, "n_head": 20, "n_layer": 36,
              "vocab_size": 50257, "n_positions": 1024}
A100 = BUILTIN_DEVICES["A100"]


def test_launch_terms_by_hand() -> None:
    t = KernelTimes(np.array([50e-6, 2e-3, 30e-6]), np.array([1e-6, 1.5e-3, 20e-6]),
                    np.array([10.0, 1.0, 2.0]), np.array(["forward", "backward", "forward"]),
                    np.array(["elementwise", "linear", "ln"]))
    terms = StepTerms(delta_s={"elementwise": 40e-6, "linear": 40e-6, "ln": 40e-6},
                      launch_s=5e-6)
    # max(t - delta, roof, l): 10 us, 1.96 ms, 20 us (roofline wins)
    assert t.phase_s(terms, "forward") == pytest.approx(10 * 10e-6 + 2 * 20e-6)
    assert t.phase_s(terms, "backward") == pytest.approx(2e-3 - 40e-6)
    assert t.phase_s(StepTerms()) == pytest.approx(10 * 50e-6 + 2e-3 + 2 * 30e-6)


def test_roofline_only_step_is_the_sum_of_rooflines() -> None:
    g = build_step_graph(model_spec(GPT2_LARGE, "g"), "train", 1024, 2)
    times = kernel_times(g, A100, ROOFLINE_KERNELS)
    s = assemble_step(g, A100, times, StepTerms())
    assert s.step_time_s == pytest.approx(s.roofline_s)
    assert s.forward_s + s.backward_s + s.optimizer_s == pytest.approx(s.step_time_s)


def test_step_is_never_below_its_roofline_and_splits_its_phases() -> None:
    p = load_predictor()
    s = predict_from_config(model_spec(GPT2_LARGE, "g"), "train", 1024, 4, A100, predictor=p)
    assert s.step_time_s >= s.roofline_s
    assert s.forward_s > 0 and s.backward_s > s.forward_s and s.optimizer_s > 0
    assert s.step_time_lo_s < s.step_time_s < s.step_time_hi_s
    inf = predict_from_config(model_spec(GPT2_LARGE, "g"), "inference", 1024, 4, A100,
                              predictor=p)
    assert inf.backward_s == 0 and inf.optimizer_s == 0 and inf.step_time_s < s.forward_s * 1.2


def test_data_and_tensor_parallel_on_one_node() -> None:
    p = load_predictor()
    spec = model_spec(GPT2_LARGE, "g")
    one = predict_from_config(spec, "train", 1024, 4, A100, predictor=p)
    dp = predict_from_config(spec, "train", 1024, 4, A100, gpus=8, parallel="dp", predictor=p)
    tp = predict_from_config(spec, "train", 1024, 4, A100, gpus=4, parallel="tp", predictor=p)
    pp = predict_from_config(spec, "train", 1024, 16, A100, gpus=4, parallel="pp",
                             predictor=p)
    assert dp.sync_s > 0 and dp.step_time_s >= one.step_time_s * 0.999
    assert tp.step_time_s < one.step_time_s and tp.sync_s > 0
    # GPipe: 16 sequences in 4x4 micro-batches; the bubble costs 3 of 7 slots
    assert pp.batch == 16 and pp.step_time_s > 0
    assert dp.row()["tokens_per_s"] > 7 * one.row()["tokens_per_s"]


def test_bf16_is_faster_with_a_wider_interval() -> None:
    p = load_predictor()
    spec = model_spec(GPT2_LARGE, "g")
    f32 = predict_from_config(spec, "train", 1024, 4, A100, predictor=p)
    b16 = predict_from_config(spec, "train", 1024, 4, A100, precision="bf16", predictor=p)
    assert b16.step_time_s < f32.step_time_s / 2
    assert (b16.step_time_hi_s / b16.step_time_s) > (f32.step_time_hi_s / f32.step_time_s)
    with pytest.raises(ValueError, match="no BF16"):
        predict_from_config(spec, "train", 1024, 4, BUILTIN_DEVICES["V100"], precision="bf16",
                            predictor=p)


def test_a_batch_that_does_not_fit_names_the_activations_and_what_fits() -> None:
    with pytest.raises(DeviceMemoryError, match=r"the activations .* do not fit .*; smallest "
                       r"change that fits: --batch (\d+)") as e:
        predict_from_config(model_spec(GPT2_LARGE, "g"), "train", 1024, 512, A100)
    b = int(str(e.value).rsplit(" ", 1)[1])
    predict_from_config(model_spec(GPT2_LARGE, "g"), "train", 1024, b, A100)  # it fits
    with pytest.raises(DeviceMemoryError, match=r"fits: --activation-checkpointing$"):
        predict_from_config(model_spec(GPT2_LARGE, "g"), "train", 1024, 64, A100)
    ok = predict_from_config(model_spec(GPT2_LARGE, "g"), "train", 1024, 64, A100,
                             options=StepOptions(activation_checkpointing=True))
    assert ok.memory_gb <= 80 and ok.recompute_s > 0.2 * ok.forward_s


GPT3_XL = {"model_type": "gpt2", "n_embd": 2048, "n_head": 16, "n_layer": 24,
           "vocab_size": 50257, "n_positions": 2048}
"""GPT-3 XL (1.3 B parameters), the shape the issue's refused 80 GB steps had."""


def test_the_weights_that_do_not_fit_are_named_with_the_smallest_fix() -> None:
    big = {**GPT3_XL, "n_embd": 4096, "n_head": 32, "n_layer": 32}  # 6.7 B: 108 GB of states
    with pytest.raises(DeviceMemoryError, match=r"the weights, gradients and Adam states "
                       r"\(10\d\.\d GB\) alone do not fit; smallest change that fits: "
                       r"--parallel tp --gpus 2$"):
        predict_from_config(model_spec(big, "g"), "train", 1024, 1, A100)
    with pytest.raises(DeviceMemoryError, match=r"fits: --zero 1$"):
        predict_from_config(model_spec(big, "g"), "train", 1024, 1, A100, gpus=8)
    z = predict_from_config(model_spec(big, "g"), "train", 1024, 1, A100, gpus=8,
                            options=StepOptions(zero=1))
    assert z.memory_parts_gb["optimizer"] == pytest.approx(8 * z.params / 8 / 1e9)


def test_measured_80gb_steps_are_not_refused() -> None:
    # weights, gradients, Adam: 16 B per parameter = 21 GB for 1.3 B; with memory-efficient
    # attention batch 1 x 2048 fits an 80 GB GPU in FP32 and in BF16 (the case)
    for prec in ("fp32", "bf16"):
        s = predict_from_config(model_spec(GPT3_XL, "g"), "train", 2048, 1,
                                BUILTIN_DEVICES["H100"], precision=prec)
        parts = s.memory_parts_gb
        assert parts["weights"] + parts["gradients"] + parts["optimizer"] == pytest.approx(
            16 * s.params / 1e9)
        assert 20 < 16 * s.params / 1e9 < 22 and s.memory_gb < 40


# --------------------------------------------------------------------------- CLI

KEYS = {"step_time_s", "step_time_lo_s", "step_time_hi_s", "forward_s", "backward_s",
        "optimizer_s", "sync_s", "compute_s", "exposed_comm_s", "bubble_s", "mfu",
        "memory_parts_gb"}


def _cfg(tmp_path: Path, cfg: dict) -> str:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def test_predict_model_config_json_contract(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _cfg(tmp_path, GPT2_LARGE)
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "predict", "--model-config", cfg, "--mode", "train",
                 "--seq-len", "1024", "--batch", "1", "--gpu", "Tesla V100-PCIE-32GB",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert isinstance(row, dict) and KEYS <= set(row)
    assert row["step_time_lo_s"] < row["step_time_s"] < row["step_time_hi_s"]
    assert row["device"] == "V100" and row["sync_s"] == 0
    assert main(["--db", db, "predict", "--model-config", cfg, "--mode", "train",
                 "--seq-len", "1024", "--batch", "2", "--gpu", "a100", "--gpus", "4",
                 "--parallel", "tp", "--precision", "bf16", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["gpus"] == 4 and row["parallel"] == "tp" and row["sync_s"] > 0
    assert main(["--db", db, "predict", "--model-config", cfg, "--mode", "inference",
                 "--seq-len", "512", "--batch", "1", "--gpu", "H800"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "MFU" in out and "exposed communication" in out
    assert main(["--db", db, "predict", "--model-config", cfg, "--seq-len", "1024",
                 "--batch", "8", "--gpu", "A100", "--gpus", "4", "--parallel", "pp",
                 "--micro-batches", "4", "--activation-checkpointing", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["micro_batches"] == 4 and row["bubble_s"] > 0 and row["recompute_s"] > 0
    base = ["--db", db, "predict", "--model-config", cfg, "--seq-len", "1024", "--batch", "4",
            "--gpu", "A100", "--gpus", "16", "--nodes", "2", "--json"]
    assert main(base) == 0
    two = json.loads(capsys.readouterr().out)
    assert main(base + ["--inter-node-gbit-s", "100"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert two["nodes"] == 2 and slow["exposed_comm_s"] > two["exposed_comm_s"] > 0
    assert row["step_time_s"] == pytest.approx(row["compute_s"] + row["exposed_comm_s"]
                                               + row["bubble_s"])


@pytest.mark.parametrize(("cfg", "args", "match"), [
    ({"model_type": "mamba"}, [], "model_type 'mamba' is not supported"),
    ({"model_type": "gpt2", "n_embd": 64}, [], "lacks 'n_head'"),
    (GPT2_LARGE, ["--seq-len", "0"], "--seq-len: 0 is not a whole number >= 1"),
    (GPT2_LARGE, ["--batch", "-1"], "--batch: -1 is not a whole number >= 1"),
    (GPT2_LARGE, ["--batch", "4096"], "needs .* GB per GPU, more than A100's 80 GB"),
    (GPT2_LARGE, ["--gpu", "GTX 480"], "unknown device 'GTX 480'"),
    (GPT2_LARGE, ["--gpu", "V100", "--precision", "bf16"], "V100 has no BF16"),
    (GPT2_LARGE, ["--gpus", "16"], "one node of A100 holds 1..8"),
    (GPT2_LARGE, ["--seq-len", "2048"], r"--seq-len 2048 exceeds config's n_positions 1024 .*"
     "use --seq-len 1024 or less"),
    (GPT2_LARGE, ["--gpus", "3", "--parallel", "tp"], "20 attention heads do not split 3 ways"),
    (GPT2_LARGE, ["--zero", "2", "--parallel", "tp", "--gpus", "2"], "--zero 2 shards over "
     "data-parallel GPUs"),
    (GPT2_LARGE, ["--micro-batches", "2"], "--micro-batches is for --parallel pp"),
])
def test_bad_model_config_input_is_one_line_with_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cfg: dict, args: list[str],
        match: str) -> None:
    base = {"--seq-len": "1024", "--batch": "2", "--gpu": "A100"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = ["--db", str(tmp_path / "w.duckdb"), "predict", "--model-config",
            _cfg(tmp_path, cfg)] + [x for kv in base.items() for x in kv] + list(
        a for a in args if a not in base and a not in base.values())
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    import re

    assert re.search(match, err), err


def test_missing_seq_len_and_a_missing_file(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "predict", "--model-config", _cfg(tmp_path, GPT2_LARGE),
                 "--gpu", "A100", "--batch", "1"]) == 2
    assert "needs --seq-len" in capsys.readouterr().err
    assert main(["--db", db, "predict", "--model-config", str(tmp_path / "none.json"),
                 "--gpu", "A100", "--batch", "1", "--seq-len", "8"]) == 2
    assert "not found" in capsys.readouterr().err


LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
             "num_hidden_layers": 32, "intermediate_size": 11008, "vocab_size": 32000,
             "max_position_embeddings": 4096}


def test_parallel_steps_split_compute_communication_and_bubble() -> None:
    p = load_predictor()
    spec = model_spec(LLAMA2_7B, "llama")
    h800 = BUILTIN_DEVICES["H800"]
    tp = predict_from_config(spec, "train", 2048, 1, h800, gpus=8, parallel="tp",
                             precision="bf16", predictor=p)
    assert tp.step_time_s == pytest.approx(tp.compute_s + tp.exposed_comm_s + tp.bubble_s)
    # 130 all-reduces of 16.8 MB over NVLink: tens of ms, not the 1.44 s
    assert 0.1 < tp.exposed_comm_s / tp.step_time_s < 0.6 and tp.mfu > 0.1
    sp = predict_from_config(spec, "train", 2048, 1, h800, gpus=8, parallel="tp",
                             precision="bf16", predictor=p,
                             options=StepOptions(sequence_parallel=True))
    assert sp.memory_parts_gb["activations"] < tp.memory_parts_gb["activations"]
    pp = predict_from_config(spec, "train", 2048, 8, BUILTIN_DEVICES["H100"], gpus=4,
                             parallel="pp", precision="bf16", predictor=p,
                             options=StepOptions(micro_batches=8))
    slots = pp.compute_s - pp.optimizer_s
    assert pp.micro_batches == 8 and pp.bubble_s / (pp.bubble_s + slots) == pytest.approx(
        3 / (8 + 3))
    more = predict_from_config(spec, "train", 2048, 16, BUILTIN_DEVICES["H100"], gpus=4,
                               parallel="pp", precision="bf16", predictor=p,
                               options=StepOptions(micro_batches=16))
    assert more.bubble_s / more.step_time_s < pp.bubble_s / pp.step_time_s
    dp = predict_from_config(model_spec(GPT2_LARGE, "g"), "train", 1024, 4, A100, gpus=8,
                             predictor=p)
    assert 0 < dp.exposed_comm_s < dp.sync_s  # the gradient all-reduce hides behind backward
    z3 = predict_from_config(model_spec(GPT2_LARGE, "g"), "train", 1024, 4, A100, gpus=8,
                             predictor=p, options=StepOptions(zero=3))
    assert z3.sync_s > dp.sync_s and z3.memory_gb < dp.memory_gb


NEUSIGHT = Path(__file__).resolve().parents[2] / "shared" / "data" / "profiles" / "neusight"


@pytest.mark.skipif(not NEUSIGHT.is_dir(), reason="../shared/data/profiles/neusight absent")
def test_no_measured_step_is_refused_on_its_device() -> None:
    from workbench.compute.devices import devices, normalise_device_name
    from workbench.compute.neusight import model_config, read_step_times

    p, table = load_predictor(), devices()
    steps = read_step_times(NEUSIGHT)
    for r in steps.to_dict("records"):
        dev = table[normalise_device_name(r["device"], table)]
        spec = model_spec(model_config(NEUSIGHT, r["model"]), r["model"])
        s = predict_from_config(spec, r["mode"], int(r["seq_len"]), int(r["batch"]), dev,
                                predictor=p)  # raises DeviceMemoryError if refused
        assert s.memory_gb <= dev.memory_gb
    assert len(steps) == 40
