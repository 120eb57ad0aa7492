"""The scenario and cubes commands, run in-process on a temporary store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.cli import main


@pytest.mark.slow
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


@pytest.mark.slow
def test_console_script_help() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "scenario" in out and "--db" in out


# -- issue 25, item 1: no command writes what it was not asked to write -------------------


@pytest.fixture(scope="module")
def clash_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding, for every built-in name, a job set of that name (3 jobs, not the
    built-in), a tiny scenario with two stored runs and 40 days of a price series."""
    from helpers_sim import START, tiny_scenario, training

    from workbench import scenarios
    from workbench.store import Store

    path = tmp_path_factory.mktemp("clash") / "wb.duckdb"
    jobs = [training("j", slots_of_work=1.0, deadline_slot=8),
            training("k", home="b", arrival_slot=1, slots_of_work=2.0, deadline_slot=8)]
    start = pd.Timestamp(START).tz_convert(None)
    hours = pd.date_range(start - pd.Timedelta(days=40), start, freq="h", inclusive="left")
    with Store(path) as store:
        store.save_scenario(tiny_scenario(jobs, n_slots=8))
        store.write_grid_series(pd.DataFrame({
            "time_utc": hours, "region": "ra", "currency": "CNY", "source": "test",
            "price_per_kwh": 0.5 + 0.1 * np.sin(np.arange(len(hours)) / 24 * 2 * np.pi),
            "carbon_g_per_kwh": 300.0}))
        for name in scenarios.builtin_names():
            store.write_jobs(name, [training(f"{name}-{i}") for i in range(3)])
    assert main(["--db", str(path), "plan", "--scenario", "tiny", "--policy", "greedy",
                 "--no-progress"]) == 0
    return path


def _read_commands(builtin: str, out: Path) -> list[list[str]]:
    """Every command that only reads the store, naming the built-in where it takes a
    scenario."""
    from helpers_sim import START

    day = pd.Timestamp(START).tz_convert(None)
    return [
        ["scenario", "list"], ["scenario", "list", "--json"],
        ["scenario", "show", builtin], ["scenario", "show", builtin, "--json"],
        ["scenario", "show", "tiny"], ["cubes", builtin], ["cubes", builtin, "--json"],
        ["data", "list"], ["data", "list", "--json"],
        ["runs", "list"], ["runs", "list", "--json"], ["runs", "show", "latest"],
        ["runs", "show", "latest", "--json"], ["runs", "compare", "latest", "latest"],
        ["runs", "export", "latest", "--out", str(out / "p.csv"),
         "--migrations-out", str(out / "m.csv")],
        ["quote", builtin, "--app", "cifar10", "--work", "1e6", "--home", "guangzhou"],
        ["quote", builtin, "--app", "cifar10", "--work", "1e6", "--home", "guangzhou",
         "--json"],
        ["forecast", "backtest", "--region", "ra", "--kind", "price", "--start",
         str((day - pd.Timedelta(days=3)).date()), "--end", str(day.date())],
    ]


@pytest.mark.slow
def test_no_read_command_writes_the_store(clash_store: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from helpers_store import files_beside, store_digest

    from workbench import scenarios

    before, files = store_digest(clash_store), files_beside(clash_store)
    for builtin in scenarios.builtin_names():
        for argv in _read_commands(builtin, tmp_path):
            assert main(["--db", str(clash_store), *argv]) == 0, argv
            err = capsys.readouterr().err
            assert "error" not in err, (argv, err)
            assert store_digest(clash_store) == before, argv
            assert files_beside(clash_store) == files, argv
    # Read commands on a --db that does not exist create no store file.
    missing = tmp_path / "none.duckdb"
    for argv in (["scenario", "show", "seed3"], ["cubes", "seed3"], ["quote", "seed3", "--app",
                 "cifar10", "--work", "1e6", "--home", "guangzhou"]):
        assert main(["--db", str(missing), *argv]) == 0
        assert not missing.exists(), argv
    assert main(["--db", str(missing), "scenario", "show", "nope"]) == 2
    assert "store" in capsys.readouterr().err and not missing.exists()


def test_the_app_reads_a_builtin_without_writing_it(clash_store: Path) -> None:
    from helpers_store import store_digest

    from workbench.app.state import WorkbenchState

    before = store_digest(clash_store)
    state = WorkbenchState(db_path=str(clash_store), scenario_name="seed3", save_runs=False)
    assert state.scenario is not None and state.scenario.name == "seed3"
    assert len(state.scenario.jobs) == 148  # the built-in, not the 3-job set
    assert store_digest(clash_store) == before


@pytest.mark.parametrize("argv", [
    ["scenario", "generate", "seed3"], ["scenario", "generate", "seed3", "--seed", "4"],
    ["plan", "--scenario", "seed3", "--no-progress"],
    ["sweep", "--scenario", "seed3", "--threads", "--out", "{tmp}/s.csv"],
], ids=["generate", "generate seed 4", "plan", "sweep"])
def test_a_builtin_over_a_job_set_of_its_name_is_refused(
        clash_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        argv: list[str]) -> None:
    from helpers_store import store_digest

    before = store_digest(clash_store)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["--db", str(clash_store), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "job set 'seed3' (3 jobs)" in err, err
    assert "--as seed3-" in err and ("--replace" in err or "--db" in err), err
    assert store_digest(clash_store) == before


@pytest.mark.slow
def test_generate_refuses_another_scenario_of_its_name_and_keeps_the_same_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers_store import store_digest

    db = str(tmp_path / "w.duckdb")
    assert main(["--db", db, "scenario", "generate", "seed3", "--as", "mine"]) == 0
    assert "generated scenario mine from seed3 (seed 0)" in capsys.readouterr().err
    kept = store_digest(db)
    # The same built-in again: nothing written.
    assert main(["--db", db, "scenario", "generate", "seed3", "--as", "mine"]) == 0
    assert "nothing written" in capsys.readouterr().err and store_digest(db) == kept
    # Another seed under that name: refused until --replace.
    assert main(["--db", db, "scenario", "generate", "seed3", "--as", "mine", "--seed",
                 "1"]) == 2
    err = capsys.readouterr().err
    assert "holds another scenario 'mine'" in err and "--replace" in err, err
    assert store_digest(db) == kept
    assert main(["--db", db, "scenario", "generate", "seed3", "--as", "mine", "--seed", "1",
                 "--replace"]) == 0
    assert "replacing what was stored" in capsys.readouterr().err
    assert store_digest(db) != kept


@pytest.mark.slow
def test_scenario_delete_removes_it_with_its_runs_and_keeps_the_data(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24 item 4: ``scenario delete NAME`` says what it deletes (the scenario, its
    runs, the grid rows of its own cube) and keeps what it was built from; a job set or a
    built-in that is not stored is refused in one line, exit 2, nothing removed."""
    from helpers_sim import tiny_scenario, training

    from workbench.store import Store

    db = tmp_path / "w.duckdb"
    jobs = [training("j", slots_of_work=1.0)]
    with Store(db) as store:
        store.save_scenario(tiny_scenario(jobs, name="bad1"))
        store.save_scenario(tiny_scenario(jobs, name="keep"))
        store.write_jobs("a-set", jobs)
    for name in ("bad1", "keep"):
        assert main(["--db", str(db), "plan", "--scenario", name, "--policy", "greedy",
                     "--no-progress", "--json"]) == 0
    capsys.readouterr()
    with Store(db) as store:
        bad_runs = set(store.runs("bad1")["run_id"])
        keep_runs = set(store.runs("keep")["run_id"])
        series = len(store.table("grid_series"))
    assert len(bad_runs) == 2  # the run and its asap-home baseline
    for argv, why in ((["a-set"], "is a job set"), (["seed3"], "is built in and not stored"),
                      (["nowhere"], "no scenario 'nowhere'")):
        assert main(["--db", str(db), "scenario", "delete", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and why in err and err.count("\n") == 1
    assert main(["--db", str(db), "scenario", "delete", "bad1", "--json"]) == 0
    gone = json.loads(capsys.readouterr().out)
    assert gone["deleted"] == "bad1" and set(gone["runs"]) == bad_runs
    assert gone["datacenters"] == 2 and gone["jobs"] == 1
    with Store(db) as store:
        assert store.scenario_names() == ["keep"]
        assert set(store.runs()["run_id"]) == keep_runs  # the other scenario's runs stay
        assert not len(store.con.execute("SELECT * FROM plan_rows WHERE run_id IN "
                                         f"({', '.join('?' * len(bad_runs))})",
                                         list(bad_runs)).fetchall())
        assert "a-set" in set(store.job_sets()["name"])
        # bad1 wrote its cube's rows; keep (same regions) reads them: they stay.
        assert gone["grid_rows"] == 0 and len(store.table("grid_series")) == series
        sc = store.load_scenario("keep")
    assert sc.n_slots == 8
    assert main(["--db", str(db), "scenario", "delete", "keep"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deleted scenario keep") and "2 stored run(s)" in out
    assert "imported grid series, job sets and profiles stay" in out
    with Store(db) as store:  # the last reader gone, the rows a scenario wrote go too
        assert f"and {series} grid rows" in out and len(store.table("grid_series")) == 0
