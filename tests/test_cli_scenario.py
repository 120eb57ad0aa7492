"""The scenario and cubes commands, run in-process on a temporary store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli import main


def test_generate_show_and_cubes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "scenario", "generate", "seed3", "--seed", "0"]) == 0
    capsys.readouterr()
    assert main(["--db", db, "scenario", "show", "seed3", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {"regions", "gpu_pools", "links", "slots", "slot_minutes", "jobs"} <= set(info)
    assert info["slots"] == 672 and len(info["regions"]) == 3
    assert main(["--db", db, "cubes", "seed3", "--json"]) == 0
    cube = json.loads(capsys.readouterr().out)
    assert set(cube["regions"]) == {"guangdong", "guizhou", "jiangsu"}
    gd = cube["regions"]["guangdong"]
    assert gd["price_per_kwh_min"] < gd["price_per_kwh_mean"] < gd["price_per_kwh_max"]
    assert main(["--db", db, "scenario", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stored"] == ["seed3"]
    assert main(["--db", db, "scenario", "show", "seed3"]) == 0
    assert "guiyang" in capsys.readouterr().out


def test_unknown_scenario_is_a_clear_error(tmp_path: Path, capsys) -> None:
    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "scenario", "show", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert "no scenario 'nowhere'" in err and "Traceback" not in err


def test_console_script_help() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "scenario" in out and "--db" in out
