"""The tutorials run top to bottom (nbclient; ``pytest --nbmake notebooks`` works too)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TIMEOUT_S = 120


def _execute(path: Path, cwd: Path) -> list[str]:
    """Run a notebook in ``cwd``; returns its stream outputs."""
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return [o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
            if o.get("output_type") == "stream"]


@pytest.mark.parametrize("name", ["01_quickstart.ipynb", "02_v_tradeoff.ipynb",
                                  "03_real_grid.ipynb", "04_grid_flexibility.ipynb"])
def test_notebook_runs(name: str) -> None:
    out = "".join(_execute(NOTEBOOKS / name, NOTEBOOKS))
    # 01 printed a TqdmWarning ("IProgress not found"): the extras bring ipywidgets.
    assert "TqdmWarning" not in out and "IProgress not found" not in out


def test_real_grid_notebook_stops_cleanly_without_data(tmp_path: Path) -> None:
    # Two levels below tmp_path there is no shared/data folder.
    where = tmp_path / "repo" / "notebooks"
    where.mkdir(parents=True)
    shutil.copy(NOTEBOOKS / "03_real_grid.ipynb", where)
    out = "".join(_execute(where / "03_real_grid.ipynb", where))
    assert "absent" in out
