"""Shared fixtures: the embedded scenario (built once per session) and the shared data path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.model import Scenario
from workbench.scenarios import build_seed3

# ../shared/data next to the checkout; WORKBENCH_SHARED_DATA overrides it (a worktree
# elsewhere).
SHARED_DATA = Path(os.environ.get("WORKBENCH_SHARED_DATA", "")
                   or Path(__file__).resolve().parents[1].parent / "shared" / "data")


@pytest.fixture(scope="session")
def seed3() -> Scenario:
    return build_seed3(seed=0)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (CI always has it)")
    return SHARED_DATA


class StoreLock:
    """Another process holding a DuckDB file's lock: :meth:`take` returns once it holds it;
    :meth:`release` (or the test's end) ends it."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[str]] = []

    def take(self, path: str | Path) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
             "print('held', flush=True); time.sleep(60)", str(path)], stdout=subprocess.PIPE,
            text=True)
        self._procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        while self._procs:
            proc = self._procs.pop()
            proc.kill()
            proc.wait(timeout=30)
            if proc.stdout is not None:  # the pipe it printed "held" on (a ResourceWarning)
                proc.stdout.close()


@pytest.fixture
def store_lock() -> Iterator[StoreLock]:
    lock = StoreLock()
    yield lock
    lock.release()
