"""Storing finished runs: one transaction, a bounded wait on a locked store, then a side file
that ``workbench import runs`` copies in."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_sim import tiny_scenario, training

from workbench.cli import main
from workbench.forecast import default_forecast_mode
from workbench.policies import make_policy
from workbench.recorders import save_results
from workbench.sim import simulate
from workbench.store import Store


@pytest.fixture
def results() -> list:
    sc = tiny_scenario([training("j", slots_of_work=1.0, deadline_slot=4)], n_slots=4)
    return [(simulate(sc, make_policy(name),
                      forecast_mode=default_forecast_mode(sc)), {"status": status})
            for name, status in (("asap-home", "baseline"), ("wait-for-cheap", "ok"))]


def test_runs_are_stored_together(tmp_path: Path, results: list) -> None:
    db = tmp_path / "wb.duckdb"
    saved = save_results(db, results)
    assert not saved.side_file and saved.path == db and len(saved.run_ids) == 2
    with Store(db) as store:
        runs = store.runs()
        assert sorted(runs["status"]) == ["baseline", "ok"]


@pytest.mark.slow
def test_locked_store_retries_then_writes_a_side_file(
    tmp_path: Path, results: list, capsys: pytest.CaptureFixture[str], store_lock,  # noqa: ANN001
) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db):
        pass
    store_lock.take(db)
    sleeps: list[float] = []
    t = [0.0]

    def sleep(s: float) -> None:
        sleeps.append(s)
        t[0] += s

    try:
        saved = save_results(db, results, wait_s=3.0, sleep=sleep, clock=lambda: t[0])
    finally:
        store_lock.release()
    assert saved.side_file and saved.path.name.startswith("wb.runs-")
    assert sleeps == [0.25, 0.5, 1.0, 1.25] and saved.waited_s == pytest.approx(3.0)
    with Store(db) as store:
        assert store.runs().empty  # nothing half-written in the store
    assert main(["--db", str(db), "import", "runs", str(saved.path)]) == 0
    assert main(["--db", str(db), "import", "runs", str(saved.path)]) == 0  # idempotent
    assert "copied 0 run(s)" in capsys.readouterr().out
    with Store(db) as store:
        assert sorted(store.runs()["run_id"]) == sorted(saved.run_ids)
        assert len(store.run_plan(saved.run_ids[1])) == len(results[1][0].plan)
