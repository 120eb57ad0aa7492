"""`workbench predict`, `workbench devices` and `workbench compute measure` (bad input too)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.store import Store

KEYS = {"gpus", "local_batch", "step_time_s", "step_time_lo_s", "step_time_hi_s",
        "compute_s", "sync_s"}


def _json(capsys: pytest.CaptureFixture[str]) -> object:
    return json.loads(capsys.readouterr().out)


def test_predict_json_has_one_row_per_combination(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "predict", "--app", "imagenet", "--gpu", "RTX 2080 Ti",
                 "--gpus", "1,2,4", "--local-batch", "32,64", "--json"]) == 0
    rows = _json(capsys)
    assert isinstance(rows, list) and len(rows) == 6
    assert all(set(r) == KEYS for r in rows)
    assert [(r["gpus"], r["local_batch"]) for r in rows] == [(n, b) for n in (1, 2, 4)
                                                             for b in (32, 64)]
    assert all(r["step_time_lo_s"] < r["step_time_s"] < r["step_time_hi_s"] for r in rows)
    assert rows[0]["sync_s"] == 0 and rows[-1]["sync_s"] > 0


def test_predict_across_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "predict", "--app", "bert", "--gpu", "a100", "--gpus", "16",
                 "--local-batch", "8", "--nodes", "2", "--json"]) == 0
    two = _json(capsys)
    assert main(["--db", db, "predict", "--app", "bert", "--gpu", "a100", "--gpus", "16",
                 "--local-batch", "8", "--nodes", "2", "--inter-node-gbit-s", "25",
                 "--json"]) == 0
    slow = _json(capsys)
    assert slow[0]["sync_s"] > two[0]["sync_s"]  # type: ignore[index]


@pytest.mark.parametrize(("argv", "message"), [
    (["--gpu", "GTX480", "--local-batch", "8"], "unknown device 'GTX480'; known: "),
    (["--gpu", "A100", "--local-batch", "0"], "--local-batch takes whole numbers N[,N...] in 1.."),
    (["--gpu", "A100", "--local-batch", "x"], "--local-batch takes whole numbers"),
    (["--gpu", "A100", "--local-batch", "8", "--gpus", "1,two"], "--gpus takes whole"),
    (["--gpu", "A100", "--local-batch", "8", "--gpus", "2", "--nodes", "4"],
     "fewer than --nodes"),
])
def test_predict_bad_input_is_one_line_exit_2(tmp_path: Path, argv: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--db", str(tmp_path / "w.duckdb"), "predict", "--app", "cifar10", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_predict_unknown_app_and_bad_graph(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "predict", "--app", "gpt5", "--gpu", "T4",
                 "--local-batch", "8"]) == 2
    assert "known: " in capsys.readouterr().err
    bad = tmp_path / "m.onnx"
    bad.write_text("nope")
    assert main(["--db", db, "predict", "--graph", str(bad), "--gpu", "T4",
                 "--local-batch", "8"]) == 2
    assert "not a readable ONNX" in capsys.readouterr().err


def test_predict_from_onnx(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers_onnx import tiny_onnx

    path = tiny_onnx(tmp_path / "tiny.onnx")
    assert main(["--db", str(tmp_path / "w.duckdb"), "predict", "--graph", str(path),
                 "--gpu", "T4", "--gpus", "1,2", "--local-batch", "16", "--json"]) == 0
    rows = _json(capsys)
    assert len(rows) == 2 and rows[0]["step_time_s"] > 0  # type: ignore[index,arg-type]


def test_devices_list_and_add(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "devices", "list"]) == 0
    assert "Ascend910B" in capsys.readouterr().out
    assert main(["--db", db, "devices", "list", "--json"]) == 0
    t4 = next(d for d in _json(capsys) if d["name"] == "T4")  # type: ignore[union-attr]
    spec = tmp_path / "b200.json"
    spec.write_text(json.dumps({**t4, "name": "B200", "fp32_tflops": 80.0}))
    assert main(["--db", db, "devices", "add", str(spec)]) == 0
    capsys.readouterr()
    assert main(["--db", db, "predict", "--app", "cifar10", "--gpu", "b200",
                 "--local-batch", "64", "--json"]) == 0
    assert len(_json(capsys)) == 1  # type: ignore[arg-type]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"name": "X"}))
    assert main(["--db", db, "devices", "add", str(broken)]) == 2
    assert "lacks field" in capsys.readouterr().err
    with Store(db, read_only=True) as store:  # the failed add left the store as it was
        assert store.table("devices")["name"].tolist() == ["B200"]
    neusight = tmp_path / "l4.json"
    neusight.write_text(json.dumps({"Device": "NVIDIA L4", "Dev_Mem": 24, "Mem_Bw": 300,
                                    "Num_Sm": 60, "Core_Per_SM": 128, "Freq": 2040,
                                    "SingleFLOPs": 31334, "L2Cache": 48}))
    assert main(["--db", db, "devices", "add", str(neusight)]) == 0
    out = capsys.readouterr().out
    assert "saved device L4" in out and "assumed tdp_w" in out
    assert main(["--db", db, "predict", "--app", "bert", "--gpu", "NVIDIA L4",
                 "--local-batch", "4", "--json"]) == 0
    assert len(_json(capsys)) == 1  # type: ignore[arg-type]


def test_measure_stores_a_step_time_that_calibrates_predict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    cmd = [sys.executable, "-c", "import time; time.sleep(0.3)"]
    assert main(["--db", db, "compute", "measure", "--app", "cifar10", "--gpu", "t4",
                 "--local-batch", "64", "--steps", "10", "--", *cmd]) == 0
    assert "s per step over 10 steps" in capsys.readouterr().out
    with Store(db, read_only=True) as store:
        m = store.table("compute_measurements")
    assert len(m) == 1 and m.loc[0, "device"] == "T4"
    assert 0.025 < m.loc[0, "step_time_s"] < 0.2
    assert main(["--db", db, "predict", "--app", "cifar10", "--gpu", "T4",
                 "--local-batch", "64", "--json"]) == 0
    calibrated = _json(capsys)[0]  # type: ignore[index]
    assert calibrated["compute_s"] == pytest.approx(m.loc[0, "step_time_s"], rel=1e-6)
    assert main(["--db", db, "compute", "measure", "--app", "cifar10", "--gpu", "t4",
                 "--local-batch", "64", "--steps", "1", "--", sys.executable, "-c",
                 "raise SystemExit(3)"]) == 2
    assert "exited with status 3; nothing stored" in capsys.readouterr().err
    assert main(["--db", db, "compute", "measure", "--app", "cifar10", "--gpu", "t4",
                 "--local-batch", "64", "--steps", "1"]) == 2
