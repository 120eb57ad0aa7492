"""Sweeps: grid expansion, carbon caps, and a small sweep on a 2-worker LocalCluster."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from helpers_policies import tiny_scenario, training_job

from workbench.caps import Caps
from workbench.cli import main
from workbench.model import Scenario
from workbench.runner import SimSettings
from workbench.store import Store
from workbench.sweep import run_sweep, sweep_points


def _scenario() -> Scenario:
    prices = [[1.0, 0.4], [1.0, 0.4], [0.3, 1.0], [0.3, 1.0]] * 2
    jobs = [training_job("t1", "a", 1.5, deadline_slot=8),
            training_job("t2", "b", 1.0, arrival_slot=1, deadline_slot=8)]
    return tiny_scenario(jobs, prices=prices, n_slots=8)


@pytest.mark.parametrize(("text", "kg", "pct", "label"), [
    ("none", None, None, "none"),
    ("1200", 1200.0, None, "1200 kg"),
    ("20%", None, 20.0, "20%"),
])
def test_carbon_cap_parse(text: str, kg: float | None, pct: float | None, label: str) -> None:
    cap = Caps.parse_carbon(text)
    assert (cap.carbon_kg, cap.carbon_pct_below_baseline, cap.label) == (kg, pct, label)
    if pct is not None:
        assert cap.resolved(100.0).carbon_kg == pytest.approx(80.0)


@pytest.mark.parametrize("bad", ["-3", "120%", "lots"])
def test_carbon_cap_refuses_bad_text(bad: str) -> None:
    with pytest.raises(ValueError, match="kg CO2 over the horizon"):
        Caps.parse_carbon(bad)


def test_grid_varies_knobs_only_where_the_policy_takes_them() -> None:
    pts = sweep_points(["lyapunov", "greedy"], V=[1.0, 10.0],
                       carbon_caps=[Caps(), Caps(carbon_pct_below_baseline=10.0)],
                       seeds=[0, 1])
    by = pd.DataFrame([{"policy": p.policy, "V": p.V, "cap": p.carbon_cap.label,
                        "seed": p.seed} for p in pts])
    assert len(by[by.policy == "lyapunov"]) == 2 * 2 * 2
    assert by[by.policy == "greedy"]["V"].isna().all()
    # The percentage cap brings the baseline in, once per seed, first.
    assert by.iloc[0].policy == "asap-home" and len(by[by.policy == "asap-home"]) == 2
    with pytest.raises(ValueError, match="V values"):
        sweep_points(["lyapunov"], V=[0.0])


@pytest.mark.slow
def test_sweep_on_a_two_worker_local_cluster(tmp_path: Path) -> None:
    sc = _scenario()
    db = tmp_path / "wb.duckdb"
    csv = tmp_path / "sweep.csv"
    pts = sweep_points(["lyapunov"], V=[1.0, 30.0],
                       carbon_caps=[Caps(), Caps(carbon_pct_below_baseline=10.0)],
                       seeds=[0])
    seen: list[str] = []
    table = run_sweep(sc, pts, db=db, csv_path=csv, n_workers=2, processes=True,
                      sim=SimSettings(noise=0.0), progress=False,
                      on_result=lambda row: seen.append(row["policy"]))
    assert len(table) == len(pts) == 5 and len(seen) == 5
    assert set(table["status"]) <= {"ok", "warnings"}, table[["status", "message"]]
    base = table[table.policy == "asap-home"].iloc[0]
    capped = table[table.carbon_cap == "10%"]
    assert capped["carbon_cap_kg"].tolist() == pytest.approx([0.9 * base["carbon_kg"]] * 2)
    assert all(math.isfinite(c) for c in table["cost"])
    with Store(db, read_only=True) as store:
        stored = set(store.runs()["run_id"])
        assert set(table["run_id"]) == stored
        rid = table.iloc[-1]["run_id"]
        assert store.run_metrics(rid)["cost"] == pytest.approx(table.iloc[-1]["cost"])
    back = pd.read_csv(csv)
    assert list(back["run_id"]) == list(table["run_id"])


def test_failed_run_becomes_an_error_row(tmp_path: Path) -> None:
    sc = _scenario()
    pts = sweep_points(["lyapunov"], seeds=[0], knobs={"migration_threshold": -0.5})
    table = run_sweep(sc, pts, n_workers=1, processes=False, progress=False)
    assert table.iloc[0]["status"] == "error"
    assert "migration_threshold" in table.iloc[0]["message"]


def test_cli_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_scenario())
    out = tmp_path / "s.csv"
    code = main(["--db", str(db), "sweep", "--scenario", "tiny", "--policy",
                 "lyapunov,asap-home", "--V", "1,10", "--seeds", "1", "--threads",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    text = capsys.readouterr().out
    assert "lyapunov" in text and "3 runs (0 failed)" in text
    assert len(pd.read_csv(out)) == 3
    assert main(["--db", str(db), "sweep", "--scenario", "tiny", "--V", "x"]) == 2
    capsys.readouterr()
    assert main(["--db", str(db), "sweep", "--scenario", "tiny", "--V", "1,1e308"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --V: 1e308 is not a number > 0 and <= 100000\n"


@pytest.mark.slow
def test_cli_sweep_keeps_dask_quiet_unless_verbose(tmp_path: Path) -> None:
    """``distributed`` is imported after the command set its loggers (a fresh process, as
    a user runs it): no INFO line of Dask's on stderr without -v; with -v they show."""
    import os
    import subprocess
    import sys

    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_scenario())
    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-m", "workbench.cli", "--db", str(db), "sweep", "--scenario",
            "tiny", "--policy", "asap-home", "--threads", "--out", str(tmp_path / "s.csv"),
            "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    quiet = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "1 runs (0 failed)" in quiet.stdout
    assert "INFO workbench.sweep" in quiet.stderr  # our own INFO lines stay
    assert not [ln for ln in quiet.stderr.splitlines() if "distributed" in ln], quiet.stderr
    loud = subprocess.run([*argv, "-v"], capture_output=True, text=True, env=env, timeout=300)
    assert loud.returncode == 0 and "distributed.scheduler" in loud.stderr


@pytest.mark.parametrize("extra", [["--noise", "-0.1"], ["--forecast-error", "-1"],
                                   ["--out", "BLOCKED/s.csv"]])
def test_cli_sweep_bad_settings_fail_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    (tmp_path / "BLOCKED").write_text("a file, not a folder")
    extra = [e.replace("BLOCKED", str(tmp_path / "BLOCKED")) for e in extra]
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_scenario())
    code = main(["--db", str(db), "sweep", "--scenario", "tiny", "--policy", "asap-home",
                 "--seeds", "1", "--threads", "--no-progress", *extra])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and extra[0] in err.splitlines()[0]
    with Store(db) as store:
        assert store.table("runs").empty
