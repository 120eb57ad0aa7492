"""Shared fixtures: the embedded scenario (built once per session) and the shared data path."""

from __future__ import annotations

import os
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
