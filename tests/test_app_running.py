"""The app's run orchestration and the cache its sessions share, without a browser."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers_sim import tiny_scenario, training

from workbench import Store
from workbench.app import WorkbenchState
from workbench.app.running import (
    ProgressRecorder,
    RunCancelled,
    RunProgress,
    quiet_closed_sockets,
)
from workbench.app.shared import Comparison, ComparisonKey, SharedCache


def test_progress_is_published_in_steps_of_one_percent() -> None:
    published: list[dict[str, Any]] = []
    progress = RunProgress(lambda **values: published.append(values))
    progress.begin(["lyapunov", "asap-home"], 1000, "running")
    assert published[0]["progress_max"] == 2000 and published[0]["stage"] == "running"
    rows = published[0]["progress_rows"]
    assert [r["policy"] for r in rows] == ["lyapunov", "asap-home"]
    assert rows[0]["started_s"] is not None and rows[1]["started_s"] is None
    published.clear()
    for _ in range(1000):
        progress.tick(1)
    counts = [p["progress"] for p in published]
    assert counts == list(range(20, 1001, 20))  # 1 % of 2,000 slots: 50 messages, not 1,000
    assert published[-1]["progress_rows"][0]["done"] == 1000
    progress.next_policy(1, "comparison")
    rows = published[-1]["progress_rows"]
    assert rows[0]["finished_s"] is not None and rows[1]["started_s"] is not None
    for _ in range(1000):
        progress.tick(1)
    assert published[-1]["progress"] == 2000 and published[-1]["progress_rows"][1]["done"] == 1000


def test_a_write_to_a_closed_tab_is_dropped_and_other_loop_errors_still_reach_the_handler(
) -> None:
    """A websocket write that failed because the tab closed (Panel does not await its
    frames) is no traceback in the server's log; any other unhandled task error still goes
    to the handler that was there before, and installing twice wraps once."""
    from tornado.iostream import StreamClosedError
    from tornado.websocket import WebSocketClosedError

    seen: list[object] = []
    loop = asyncio.new_event_loop()
    try:
        loop.set_exception_handler(lambda _lp, ctx: seen.append(ctx["exception"]))
        quiet_closed_sockets(loop)
        handler = loop.get_exception_handler()
        quiet_closed_sockets(loop)
        assert loop.get_exception_handler() is handler
        for exc in (WebSocketClosedError(), StreamClosedError()):
            loop.call_exception_handler({"message": "Task exception was never retrieved",
                                         "exception": exc})
        assert seen == []
        other = RuntimeError("a bug")
        loop.call_exception_handler({"message": "Task exception was never retrieved",
                                     "exception": other})
        assert seen == [other]
    finally:
        loop.close()


def test_cancel_stops_a_run_at_the_next_slot() -> None:
    progress = RunProgress(lambda **_: None)
    progress.begin(["greedy"], 4, "running")
    recorder = progress.recorder()
    recorder.record(None)  # type: ignore[arg-type]  (the record is not read)
    progress.cancel_requested.set()
    with pytest.raises(RunCancelled):
        recorder.record(None)  # type: ignore[arg-type]
    progress.begin(["greedy"], 4, "again")  # a new run starts uncancelled
    assert not progress.cancel_requested.is_set()
    ticks: list[int] = []
    ProgressRecorder(ticks.append).record(None)  # type: ignore[arg-type]
    assert ticks == [1]


def _key(**change: Any) -> ComparisonKey:
    base = {"db_path": "a.duckdb", "scenario": "s", "fingerprint": "f1", "slot_s": 900,
            "n_slots": 8, "forecast_mode": None, "forecast_error": 0.0}
    return ComparisonKey(**{**base, **change})


def test_comparisons_are_kept_per_key_and_policy() -> None:
    cache = SharedCache()
    one = Comparison(metrics={"cost": 1.0}, plan=pd.DataFrame(), run_id="r1")
    cache.keep_comparison(_key(), "asap-home", one)
    assert cache.comparisons(_key(), ["offline", "asap-home"]) == {"asap-home": one}
    for other in (_key(fingerprint="f2"), _key(slot_s=1800), _key(forecast_mode="perfect"),
                  _key(db_path="b.duckdb")):
        assert cache.comparisons(other, ["asap-home"]) == {}
    assert list(cache.comparisons(_key(), ["asap-home", "offline"])) == ["asap-home"]


def test_stored_runs_are_kept_until_deleted() -> None:
    cache = SharedCache()
    run = object()
    cache.keep_stored_run("a.duckdb", "r1", "f1", run)  # type: ignore[arg-type]
    assert cache.stored_run("a.duckdb", "r1", "f1") is run
    assert cache.stored_run("a.duckdb", "r1", "f2") is None  # another scenario version
    cache.forget_runs("b.duckdb", ["r1"])  # another store's run of that id
    assert cache.stored_run("a.duckdb", "r1", "f1") is run
    cache.forget_runs("a.duckdb", ["r1"])
    assert cache.stored_run("a.duckdb", "r1", "f1") is None


@pytest.mark.slow
def test_sessions_share_one_scenario_and_comparisons_not_another_cache(tmp_path: Path) -> None:
    """Sessions on one cache load the scenario once and run a comparison once; a session
    given its own cache shares nothing."""
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(tiny_scenario([training("j1", deadline_slot=8)], name="tiny"))
    cache = SharedCache()

    def session(shared: SharedCache) -> WorkbenchState:
        return WorkbenchState(shared=shared, db_path=str(db), scenario_name="tiny",
                              policy="greedy", baseline_policies=["asap-home"],
                              save_runs=False)

    first, second, alone = session(cache), session(cache), session(SharedCache())
    assert first.scenario is second.scenario and alone.scenario is not first.scenario
    for s, ran in ((first, ["greedy", "asap-home"]), (second, ["greedy"]),
                   (alone, ["greedy", "asap-home"])):
        assert s.run() is not None
        assert [r["policy"] for r in s.progress_rows] == ran
        assert "attribution" in s.result.meta and set(s.baselines) == {"asap-home"}


def test_scenarios_load_concurrently_into_one_object(tmp_path: Path) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(tiny_scenario([training("j1")], name="tiny"))
    cache = SharedCache()
    got: list[object] = []

    def load() -> None:
        with Store(db, read_only=True) as store:
            got.append(cache.scenario(str(db), "tiny", store)[0])

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(g is got[0] for g in got)
