"""The Makefile's entry points say what they do (issue 37: `make run` installed for two
minutes in silence; the notebooks had no headless way to run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry(target: str) -> str:
    """The commands ``make`` would run for ``target`` (nothing is run: ``-n``; ``-B``
    treats every prerequisite as out of date, the first use)."""
    proc = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=60)
    return proc.stdout


def test_make_run_shows_the_install() -> None:
    text = _dry("run")
    install = [line for line in text.splitlines() if "pip install" in line and "-e" in line]
    assert install and all("--quiet" not in line for line in install), install
    assert "Installing the workbench" in text
    assert "mkdir -p out" in text  # plan --out out/plan.csv needs the folder


def test_the_notebooks_run_headless() -> None:
    text = _dry("notebooks-run")
    assert '".[notebooks]"' in text
    assert "nbconvert --to notebook" in text and "--execute" in text
