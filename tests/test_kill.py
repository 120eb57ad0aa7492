"""kill -9 during a plan and during an import: the store opens afterwards and holds exactly
what it held before, or the whole of what finished; ``--out`` is never a partial plan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.io.plan_csv import read_plan_csv
from workbench.store import Store

ROOT = Path(__file__).resolve().parents[1]


def _cli(db: Path, *argv: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "workbench.cli", "--db", str(db), *argv],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill_after(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """SIGKILL ``proc`` after ``seconds`` unless it ended; True when it was killed."""
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return True


@pytest.mark.slow
def test_kill_during_plan_stores_nothing_and_keeps_out(tmp_path: Path) -> None:
    db = tmp_path / "wb.duckdb"
    assert subprocess.run([sys.executable, "-m", "workbench.cli", "--db", str(db), "scenario",
                           "generate", "seed3"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, timeout=120).returncode == 0
    out = tmp_path / "plan.csv"
    out.write_text("an earlier plan\n")
    proc = _cli(db, "plan", "--scenario", "seed3", "--policy", "lyapunov", "--solver", "fast",
                "--no-progress", "--out", str(out))
    # Killed once the policy's plan has begun (its partial CSV exists): the asap-home
    # baseline has finished by then, so a dangling baseline would show.
    deadline = time.monotonic() + 120.0
    while (time.monotonic() < deadline and proc.poll() is None
           and not list(tmp_path.glob(".plan.csv.*.partial"))):
        time.sleep(0.05)
    killed = _kill_after(proc, 0.5)
    with Store(db) as store:  # opens: the file is not damaged
        runs = store.runs("seed3")
    if killed:
        assert runs.empty, "a killed plan stored a run (a dangling baseline?)"
        assert out.read_text() == "an earlier plan\n"
        # What the killed plan had written stays under a hidden temporary name only.
        written = {p.name for p in tmp_path.iterdir() if "plan" in p.name} - {"plan.csv"}
        assert written <= {p.name for p in tmp_path.glob(".plan.csv.*.partial")}
    else:  # a very fast machine finished: then both runs and the whole plan are there
        assert sorted(runs["policy"]) == ["asap-home", "lyapunov"]
        assert len(read_plan_csv(out)) > 0


@pytest.mark.slow
def test_kill_during_import_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "wb.duckdb"
    times = pd.date_range("2023-01-01", periods=400_000, freq="min")
    head = "Datetime (UTC),Datetime (Local),Price (USD/MWh)\n"
    small = tmp_path / "small.csv"
    small.write_text(head + "".join(f"{t.isoformat()}+00:00,{t.isoformat()}+00:00,{i}.5\n"
                                    for i, t in enumerate(times[:24])))
    assert subprocess.run([sys.executable, "-m", "workbench.cli", "--db", str(db), "import",
                           "grid", "price-csv", str(small), "--region", "R"],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          timeout=120).returncode == 0
    with Store(db) as store:
        before = store.table("grid_series")
    big = tmp_path / "big.csv"
    stamps = times.strftime("%Y-%m-%d %H:%M:%S+00:00")
    values = np.round(np.random.default_rng(0).normal(50, 10, len(times)), 3).astype(str)
    big.write_text(head + "\n".join(f"{s},{s},{v}" for s, v in zip(stamps, values, strict=True))
                   + "\n")
    for delay in (1.0, 3.0):
        proc = _cli(db, "import", "grid", "price-csv", str(big), "--region", "R")
        killed = _kill_after(proc, delay)
        with Store(db) as store:
            after = store.table("grid_series")
        if killed and len(after) != len(times):
            # Killed before its commit: the store is as it was. (A kill that lands after the
            # commit, while the process exits, leaves the whole import: never a part of it.)
            pd.testing.assert_frame_equal(after, before)
        else:
            assert len(after) == len(times)
            assert after["price_per_kwh"].notna().all()
            break
