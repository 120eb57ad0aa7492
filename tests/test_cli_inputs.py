"""Every input path ends in one line naming the field (and row, and file) and the fix, exit
2: the values that overflowed, were not numbers, were out of any plausible range, or were
accepted and stored (issue 35 items 4-6), over every command that reads them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from workbench.cli import main

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "examples" / "models"
GPT2 = json.loads((MODELS / "gpt2-large.json").read_text())


def _config(d: Path, **changes: object) -> Path:
    """gpt2-large's config.json with ``changes`` written as JSON text (1e999 stays a JSON
    number: Python reads it as inf)."""
    text = json.dumps({**GPT2, **{k: f"@{k}@" for k in changes}})
    for k, v in changes.items():
        text = text.replace(f'"@{k}@"', str(v))
    path = d / "model.json"
    path.write_text(text)
    return path


def _llm(d: Path, **row: str) -> Path:
    base = {"name": "j1", "time": "0", "model_config": str(MODELS / "opt-1.3b.json"),
            "seq_len": "2048", "global_batch": "32", "tokens": "5e8", "precision": "bf16",
            "gpus": "4"}
    base |= row
    path = d / "llm.csv"
    path.write_text(",".join(base) + "\n" + ",".join(base.values()) + "\n")
    return path


def _device(d: Path, **fields: object) -> Path:
    base = {"name": "lab-1", "fp32_tflops": 60.0, "fp16_tflops": 1000.0,
            "mem_bw_gb_s": 4000.0, "memory_gb": 80.0, "tdp_w": 700.0,
            "intra_node_gb_s": 450.0, "inter_node_gbit_s": 400.0}
    text = json.dumps({**base, **{k: f"@{k}@" for k in fields}})
    for k, v in fields.items():
        text = text.replace(f'"@{k}@"', v if isinstance(v, str) and v.startswith("1e")
                            else json.dumps(v))
    path = d / "device.json"
    path.write_text(text)
    return path


def _neusight(d: Path, **fields: object) -> Path:
    base = {"Device": "Lab X", "Dev_Mem": 24, "Mem_Bw": 300, "Num_Sm": 60,
            "Core_Per_SM": 128, "Freq": 2040, "SingleFLOPs": 31334, "L2Cache": 48}
    text = json.dumps({**base, **{k: f"@{k}@" for k in fields}})
    for k, v in fields.items():
        text = text.replace(f'"@{k}@"', str(v))
    path = d / "neusight.json"
    path.write_text(text)
    return path


def _zeus(d: Path, rows: str) -> Path:
    """A Zeus folder: every GPU's summary_power file the shared data's, but the first's
    rows ``rows``."""
    src = REPO.parent / "shared" / "data" / "profiles" / "zeus"
    if not src.is_dir():
        pytest.skip(f"real data folder {src} is absent (CI always has it)")
    out = d / "zeus"
    out.mkdir()
    for f in src.glob("summary_power_*.csv"):
        (out / f.name).write_text(f.read_text())
    (out / "summary_power_a40.csv").write_text(rows)
    return out


ZEUS_HEAD = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"

PREDICT = ["predict", "--gpu", "A100", "--batch", "1", "--seq-len", "512"]

Case = tuple[Callable[[Path], list[str]], tuple[str, ...]]

CASES: dict[str, Case] = {
    # model configs (predict --model-config, and the llm-jobs importer through them)
    "n_layer overflows": (lambda d: [*PREDICT, "--model-config", str(_config(d, n_layer="1e999"))],
                          ("n_layer", "whole number")),
    "n_layer NaN": (lambda d: [*PREDICT, "--model-config", str(_config(d, n_layer="NaN"))],
                    ("n_layer", "whole number")),
    "n_embd huge": (lambda d: [*PREDICT, "--model-config", str(_config(d, n_embd="1e12"))],
                    ("n_embd", "whole number")),
    "model config is a folder": (lambda d: [*PREDICT, "--model-config", str(d)],
                                 ("is a folder", "config.json")),
    # llm-jobs rows
    "llm time overflows": (lambda d: ["import", "jobs", "llm-jobs", str(_llm(d, time="1e20")),
                                      "--into", "x"], ("line 2", "'time'")),
    "llm seq_len fraction": (lambda d: ["import", "jobs", "llm-jobs",
                                        str(_llm(d, seq_len="1.5")), "--into", "x"],
                             ("line 2", "'seq_len'", "whole number")),
    "llm gpus 1e9": (lambda d: ["import", "jobs", "llm-jobs", str(_llm(d, gpus="1000000000")),
                                "--into", "x"], ("line 2", "'gpus'", "4096")),
    "llm tokens text": (lambda d: ["import", "jobs", "llm-jobs", str(_llm(d, tokens="lots")),
                                   "--into", "x"], ("line 2", "'tokens'", "not a number")),
    "llm model fits nowhere": (
        lambda d: ["import", "jobs", "llm-jobs",
                   str(_llm(d, model_config=str(_config(d, n_layer=2000, n_embd=16384,
                                                          n_head=16)), seq_len="1024")),
                   "--into", "x"], ("line 2", "fits on none")),
    # devices add (the project's JSON and NeuSight's)
    "device 1e30 TFLOP/s": (lambda d: ["devices", "add", str(_device(d, fp32_tflops=1e30))],
                            ("fp32_tflops", "check the unit")),
    "device empty name": (lambda d: ["devices", "add", str(_device(d, name=""))],
                          ("name of 1 to 64",)),
    "device boolean figure": (lambda d: ["devices", "add", str(_device(d, fp32_tflops=True))],
                              ("fp32_tflops must be a number",)),
    "device sms overflow": (lambda d: ["devices", "add", str(_device(d, sms="1e999"))],
                            ("sms must be a whole number",)),
    "neusight Num_Sm overflow": (lambda d: ["devices", "add", str(_neusight(d, Num_Sm="1e999"))],
                                 ("Num_Sm", "not a finite number")),
    # fit power-limits on Zeus files
    "zeus text power": (lambda d: ["fit", "power-limits", "--profiles", str(_zeus(
        d, ZEUS_HEAD + "cifar100,resnet,64,adam,100,20,lots\n"))],
                        ("summary_power_a40.csv", "line 2", "average_power")),
    "zeus one limit per workload": (lambda d: ["fit", "power-limits", "--profiles", str(_zeus(
        d, ZEUS_HEAD + "cifar100,resnet,64,adam,100,20,90\ncifar100,vgg,64,adam,150,20,90\n"))],
                                    ("summary_power_a40.csv", "two or more power limits")),
    "zeus empty file": (lambda d: ["fit", "power-limits", "--profiles", str(_zeus(d, ""))],
                        ("summary_power_a40.csv", "empty")),
    # flags
    "plan --power-limits ''": (lambda d: ["plan", "--scenario", "seed3", "--power-limits", ""],
                               ("--power-limits", "empty")),
    "quote --power-limits ''": (lambda d: ["quote", "seed3", "--app", "cifar10", "--work",
                                           "1e6", "--home", "guangzhou", "--power-limits", ""],
                                ("--power-limits", "empty")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_value_is_one_line_naming_it(case: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    argv, words = CASES[case]
    args = argv(tmp_path)
    assert main([*args, "--db", str(tmp_path / "w.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.slow
def test_a_long_run_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                    ) -> None:
    """A 10,000-character name was stored and broke the 100-column lines of
    ``runs compare``."""
    db = ["--db", str(tmp_path / "w.duckdb")]
    assert main(["scenario", "generate", "seed3", *db]) == 0
    assert main(["plan", "--scenario", "seed3", "--policy", "asap-home", "--no-baseline",
                 "--no-progress", "--json", *db]) == 0
    capsys.readouterr()
    assert main(["runs", "rename", "latest", "x" * 10_000, *db]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "10,000 characters" in err and "at most 64" in err
    assert main(["runs", "rename", "latest", "a\nb", *db]) == 2
    assert "printable" in capsys.readouterr().err
    assert main(["runs", "rename", "latest", "weekly baseline", *db]) == 0


def test_urdb_demand_errors_name_the_key_and_structure(tmp_path: Path) -> None:
    """A text ``flatdemandmonths`` raised ValueError; a demand schedule's period beyond the
    demand structure was said to be beyond the energy structure."""
    from workbench.io.errors import InputError
    from workbench.io.urdb import read_urdb_demand

    tier = [[{"rate": 10.0, "unit": "kW"}]]
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"flatdemandstructure": tier, "flatdemandmonths": "all"}))
    with pytest.raises(InputError, match="flatdemandmonths") as err:
        read_urdb_demand(flat)
    assert "flat.json" in str(err.value)
    tou = tmp_path / "tou.json"
    tou.write_text(json.dumps({"demandratestructure": tier,
                               "demandweekdayschedule": [[1] * 24] * 12,
                               "demandweekendschedule": [[0] * 24] * 12}))
    with pytest.raises(InputError, match="demandratestructure has 1 periods"):
        read_urdb_demand(tou)
