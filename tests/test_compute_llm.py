"""LLM jobs in the planner: critical batch, predicted profiles, [[jobs.llm]], trace, quote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from workbench.cli import main
from workbench.compute.llm import (
    LlmJobSpec,
    critical_batch_tokens,
    kaplan_loss,
    noise_scale_trajectory,
)
from workbench.perf import ecu, iteration_time, power_w
from workbench.profiles import predict_llm_profile_tp
from workbench.store import Store

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "examples" / "models"
START = pd.Timestamp("2023-07-10T00:00:00Z")


def test_kaplan_loss_and_critical_batch() -> None:
    # L(N, inf) = (N_c / N)^alpha_N: 1.5e9 non-embedding parameters ~ 2.3 nats
    assert kaplan_loss(1.5e9, 1e30) == pytest.approx((8.8e13 / 1.5e9) ** 0.076, rel=1e-6)
    assert kaplan_loss(1.5e9, 1e9) > kaplan_loss(1.5e9, 1e11)  # more data, lower loss
    assert critical_batch_tokens(2.0) == pytest.approx(2e8 / 2.0 ** (1 / 0.21))
    prog, phi = noise_scale_trajectory(7e8, 1024, 1e10)
    assert prog[0] == 0 and prog[-1] == 1 and np.all(np.diff(phi) > 0)  # phi grows


def _job(**kw: Any) -> LlmJobSpec:
    base = {"name": "llm:t", "model_config": MODELS / "gpt2-large.json", "seq_len": 1024,
            "global_batch": 256, "tokens": 4e9, "precision": "bf16"}
    return LlmJobSpec(**(base | kw))


def test_job_spec_validation() -> None:
    with pytest.raises(ValueError, match="precision 'fp8'"):
        _job(precision="fp8")
    with pytest.raises(ValueError, match="tokens"):
        _job(tokens=0)
    assert _job(purpose="finetune").tokens_before == 300e9
    assert _job().work_samples == pytest.approx(4e9 / 1024)


def test_llm_profile_is_predicted_and_consistent() -> None:
    prof, tp = predict_llm_profile_tp(_job(), "H800")
    assert tp == 1 and prof.derived and prof.predicted
    lo, hi = prof.step_time_interval  # type: ignore[misc]
    assert lo < 1 < hi
    assert "predicted by the kernel-level model" in prof.source
    assert "Kaplan" in prof.source
    # eight GPUs at the same local batch: more sequences per second, sublinearly
    x1 = 32 / float(iteration_time(prof.throughput, 1, 32))
    x8 = 256 / float(iteration_time(prof.throughput, 8, 256))
    assert 4 * x1 < x8 <= 8 * x1 * 1.0001
    assert float(ecu(prof, 8, 256, 0.5)) > 0 and float(power_w(prof, 8, 256)) <= 8 * 700
    f32, _ = predict_llm_profile_tp(_job(precision="fp32"), "H800")
    assert f32.step_time_interval[1] < hi  # type: ignore[index]  # BF16 widened


def test_a_model_that_needs_tensor_parallelism() -> None:
    job = _job(model_config=MODELS / "llama-2-7b.json", seq_len=2048, global_batch=64,
               tokens=3e8, purpose="finetune")
    _, tp_h800 = predict_llm_profile_tp(job, "H800")
    _, tp_910b = predict_llm_profile_tp(job, "Ascend910B")
    assert tp_h800 == 2 and tp_910b == 4  # 80 GB vs 64 GB


def _grid(store: Store, region: str, base: float) -> None:
    times = pd.date_range(START - pd.Timedelta(days=2), periods=24 * 5, freq="h")
    hours = np.arange(len(times))
    store.write_grid_series(pd.DataFrame({
        "time_utc": times, "region": region,
        "price_per_kwh": base * (1 + 0.5 * np.sin(hours * 2 * np.pi / 24)),
        "currency": "USD", "carbon_g_per_kwh": 300 + 100 * np.cos(hours * 2 * np.pi / 24),
        "source": "test"}))


@pytest.mark.slow
def test_example_config_builds_and_plans(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """examples/llm_jobs.toml on synthetic series for its three regions: every LLM job gets a
    predicted profile on every pool type and the planner runs them all."""
    db = tmp_path / "w.duckdb"
    with Store(db) as store:
        for i, z in enumerate(("US-CAL-CISO", "US-TEX-ERCO", "DE-LU")):
            _grid(store, z, 0.08 + 0.03 * i)
    assert main(["--db", str(db), "scenario", "build", "llm3", "--config",
                 str(REPO / "examples" / "llm_jobs.toml")]) == 0
    capsys.readouterr()
    with Store(db, read_only=True) as store:
        sc = store.load_scenario("llm3")
    apps = {j.app for j in sc.jobs}
    assert apps == {"llm:llm3/pretrain-gpt2-large", "llm:llm3/finetune-opt-1.3b",
                    "llm:llm3/finetune-llama-2-7b"}
    profs = {(p.app, p.gpu_type): p for p in sc.profiles}
    for app in apps:
        for gpu in ("H800", "A100", "Ascend910B"):
            assert profs[(app, gpu)].predicted, (app, gpu)
    llama = next(j for j in sc.jobs if j.app == "llm:llm3/finetune-llama-2-7b")
    assert all(c % 4 == 0 for c in llama.gpu_counts)
    assert main(["--db", str(db), "plan", "--scenario", "llm3", "--policy", "greedy",
                 "--no-baseline", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["jobs_total"] == 3 and out["jobs_finished"] == 3
    assert out["energy_kwh"] > 0 and out["cost"] > 0


def test_llm_trace_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "llm.csv"
    cfg = MODELS / "opt-1.3b.json"
    csv.write_text("name,time,model_config,seq_len,global_batch,tokens,precision,gpus,"
                   "deadline_h\n"
                   f"ft1,0,{cfg},2048,64,1e9,bf16,8,24\n"
                   f"ft2,3600,{cfg},2048,32,5e8,fp32,4,\n")
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "import", "jobs", "llm-jobs", str(csv), "--into", "llm",
                 "--reference-gpu", "A100"]) == 0
    assert "imported 2 jobs" in capsys.readouterr().out
    with Store(db, read_only=True) as store:
        jobs = store.load_jobs("llm")
        profs = [p for p in store.load_profiles() if p.app.startswith("llm:")]
    assert {j.app for j in jobs} == {"llm:llm/ft1", "llm:llm/ft2"}
    assert {p.gpu_type for p in profs} >= {"A100", "H800", "Ascend910B"}
    assert all(p.predicted for p in profs)
    bad = tmp_path / "bad.csv"
    bad.write_text("name,time,model_config,seq_len,global_batch,tokens,precision,gpus\n"
                   f"x,0,{cfg},0,64,1e9,bf16,8\n")
    assert main(["--db", db, "import", "jobs", "llm-jobs", str(bad), "--into", "bad"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "seq_len" in err


@pytest.mark.slow
@pytest.mark.shared_data
def test_example_config_on_real_grid_data(shared_data: Path, tmp_path: Path) -> None:
    from workbench.build import build_and_save
    from workbench.io.grid import import_grid

    d = shared_data / "grid" / "sustain-cluster"
    with Store(tmp_path / "w.duckdb") as store:
        for z in ("US-CAL-CISO", "US-TEX-ERCO", "DE-LU"):
            import_grid(store, "electricitymaps-csv", d / f"carbon/{z}/{z}_2023_hourly.csv",
                        region=z)
            import_grid(store, "price-csv", d / f"prices/{z}/{z}_electricity_prices_2023.csv",
                        region=z)
        sc = build_and_save(store, REPO / "examples" / "llm_jobs.toml")
    assert len(sc.jobs) == 3 and all(p.predicted for p in sc.profiles)


def test_quote_takes_a_model_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "quote", "seed3", "--model-config",
                 str(MODELS / "opt-1.3b.json"), "--seq-len", "2048", "--global-batch", "64",
                 "--tokens", "2e8", "--purpose", "finetune", "--home", "guangzhou",
                 "--gpus", "1-8", "--json"]) in (0, 1)
    data = json.loads(capsys.readouterr().out)
    opts = data["options"]
    assert opts and all(o["profile"] == "predicted" for o in opts)
    assert {o["gpu_type"] for o in opts} <= {"H800", "A100", "Ascend910B"}
    assert main(["--db", db, "quote", "seed3", "--model-config",
                 str(MODELS / "opt-1.3b.json"), "--home", "guangzhou"]) == 2
    assert "needs --seq-len, --global-batch, --tokens" in capsys.readouterr().err


def test_quote_honours_the_asked_batch_with_sizes_and_mfu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    args = ["--db", db, "quote", "seed3", "--model-config", str(MODELS / "llama-2-7b.json"),
            "--seq-len", "2048", "--global-batch", "64", "--tokens", "2e9", "--home",
            "guiyang", "--top", "50", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    best, opts = out["recommended"], out["options"]
    assert best["batch_size"] == 64  # the quote chose 81
    assert all(r["batch_size"] == 64 or "below the job's batch 64" in r["note"] for r in opts)
    assert all(r["n_gpus"] % 2 == 0 for r in opts)  # 7 B needs 2-way TP on 80 GB and 64 GB
    # checkpoint: FP32 weights + Adam moments, 12 B x 6.74 B parameters; data: 2 B/token
    assert out["spec"]["checkpoint_gb"] == pytest.approx(12 * 6.738e9 / 1e9, rel=1e-3)
    assert out["spec"]["dataset_gb"] == pytest.approx(4.0)
    assert 0.05 < best["mfu"] < 0.8 and best["step_time_s"] > 0
    assert main(args[:-1]) == 0
    assert "model FLOPs utilisation" in capsys.readouterr().out
    bad = args[:6] + ["--seq-len", "8192"] + args[8:]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "max_position_embeddings 4096" in err


def test_llm_job_sizes_come_from_the_model() -> None:
    from datetime import UTC, datetime

    from workbench.llm_jobs import llm_job

    spec = _job(model_config=MODELS / "opt-1.3b.json", seq_len=2048, tokens=1e9)
    job = llm_job(spec, "j", datetime(2025, 1, 1, tzinfo=UTC), "home", 8)
    params = 1.3158e9
    assert job.checkpoint_gb == pytest.approx(12 * params / 1e9, rel=1e-3)
    assert job.dataset_gb == pytest.approx(2.0)
    ft = llm_job(_job(model_config=MODELS / "opt-1.3b.json", seq_len=2048, tokens=1e9,
                      purpose="finetune"), "j", datetime(2025, 1, 1, tzinfo=UTC), "home", 8)
    assert ft.dataset_gb == pytest.approx(2.0 + 2 * params / 1e9, rel=1e-3)
    given = llm_job(spec, "j", datetime(2025, 1, 1, tzinfo=UTC), "home", 8, ckpt_gb=5.0,
                    data_gb=1.0)
    assert (given.checkpoint_gb, given.dataset_gb) == (5.0, 1.0)


def test_llm_trace_refuses_a_sequence_beyond_the_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,time,model_config,seq_len,global_batch,tokens,precision,gpus\n"
                   f"x,0,{MODELS / 'opt-1.3b.json'},4096,64,1e9,bf16,8\n")
    assert main(["--db", str(tmp_path / "w.duckdb"), "import", "jobs", "llm-jobs", str(bad),
                 "--into", "bad"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "seq_len" in err and "max_position_embeddings 2048" in err
    bad.write_text("name,time,model_config,seq_len,global_batch,tokens,precision,gpus,zero\n"
                   f"x,0,{MODELS / 'opt-1.3b.json'},2048,64,1e9,bf16,8,4\n")
    assert main(["--db", str(tmp_path / "w.duckdb"), "import", "jobs", "llm-jobs", str(bad),
                 "--into", "bad"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "zero" in err and "give 0, 1, 2 or 3" in err


def test_zero_jobs_take_whole_nodes_and_fit_where_replicas_did_not() -> None:
    job = _job(model_config=MODELS / "llama-2-7b.json", seq_len=2048, global_batch=64,
               tokens=3e8, zero=3, activation_checkpointing=True)
    prof, unit = predict_llm_profile_tp(job, "Ascend910B")
    assert unit == 8 and "ZeRO stage 3" in prof.source
    _, tp = predict_llm_profile_tp(_job(model_config=MODELS / "llama-2-7b.json",
                                        seq_len=2048, global_batch=64, tokens=3e8),
                                   "Ascend910B")
    assert tp == 4
    with pytest.raises(ValueError, match="zero 5"):
        _job(zero=5)
