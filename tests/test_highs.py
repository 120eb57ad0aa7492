"""The one HiGHS adapter: models built by name, statuses returned, a quiet stdout; and the
optim layer's place below the policies."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import highspy
import numpy as np
import pytest

from workbench.optim.highs import (
    Coords,
    SparseLp,
    highs_lp,
    new_highs,
    solve,
    termination_name,
)

WORKBENCH = Path(__file__).resolve().parents[1] / "workbench"


def _diet() -> SparseLp:
    """min 2a + 3b  s.t.  a + b >= 4,  a - b <= 1,  a, b >= 0: optimum a = 2.5, b = 1.5."""
    lp = SparseLp()
    lp.add_columns("a", np.array([np.inf]))
    lp.add_columns("b", np.array([np.inf]))
    lp.set_cost("a", 2.0)
    lp.set_cost("b", 3.0)
    one = Coords.grid(row=1)
    lp.add_rows("demand", one, np.array([0, 1]), np.array([1.0, 1.0]), 4.0, np.inf,
                row=np.array([0, 0]))
    lp.add_rows("balance", one, np.array([0, 1]), np.array([1.0, -1.0]), -np.inf, 1.0,
                row=np.array([0, 0]))
    return lp


def test_a_model_built_by_name_solves_to_its_hand_optimum() -> None:
    lp = _diet()
    assert (lp.n_cols, lp.n_rows) == (2, 2)
    assert lp.cols == {"a": slice(0, 1), "b": slice(1, 2)}
    assert lp.rows == {"demand": slice(0, 1), "balance": slice(1, 2)}
    res = solve(new_highs(time_limit_s=10.0), lp.highs_lp())
    assert res.optimal and res.has_solution and res.status == "Optimal"
    np.testing.assert_allclose(res.x, [2.5, 1.5], atol=1e-9)
    assert res.objective == pytest.approx(9.5)
    # Duals: a unit more demand costs 2.5; a unit more room in the balance saves 0.5.
    np.testing.assert_allclose(res.row_dual[lp.rows["demand"]], [2.5], atol=1e-9)
    np.testing.assert_allclose(res.row_dual[lp.rows["balance"]], [-0.5], atol=1e-9)


@pytest.mark.parametrize(("presolve", "option"), [(None, "choose"), (True, "on"),
                                                  (False, "off")])
def test_presolve_is_set_only_when_asked_and_the_optimum_is_the_same(
        presolve: bool | None, option: str) -> None:
    h = new_highs(time_limit_s=10.0, presolve=presolve)
    assert h.getOptionValue("presolve")[1] == option
    res = solve(h, _diet().highs_lp())
    assert res.optimal and res.objective == pytest.approx(9.5)


def test_integral_columns_and_a_warm_start() -> None:
    # max 5x + 4y  s.t.  6x + 4y <= 24,  x + 2y <= 6,  x, y integer in [0, 10]:
    # the LP optimum (3, 1.5) is fractional, the MILP's is (4, 0) with 20.
    lp = SparseLp(maximize=True)
    lp.add_columns("xy", np.full(2, 10.0), integral=True)
    lp.set_cost("xy", np.array([5.0, 4.0]))
    lp.add_rows("cap", Coords.grid(row=2), np.array([0, 1, 0, 1]),
                np.array([6.0, 4.0, 1.0, 2.0]), -np.inf, np.array([24.0, 6.0]),
                row=np.array([0, 0, 1, 1]))
    res = solve(new_highs(mip_rel_gap=0.0), lp.highs_lp(), start=np.array([2.0, 2.0]))
    assert res.optimal and res.objective == pytest.approx(20.0)
    np.testing.assert_allclose(res.x, [4.0, 0.0], atol=1e-9)
    assert res.mip_gap == pytest.approx(0.0, abs=1e-9)


def test_an_infeasible_model_is_reported_not_solved() -> None:
    lp = _diet()
    lp.add_rows("impossible", Coords.grid(row=1), np.array([0]), np.array([1.0]), -np.inf,
                -1.0, row=np.array([0]))
    res = solve(new_highs(), lp.highs_lp())
    assert not res.optimal and not res.has_solution
    assert res.model_status == highspy.HighsModelStatus.kInfeasible
    assert termination_name(res.model_status) == "infeasible"


def test_termination_names_follow_the_pyomo_reference() -> None:
    s = highspy.HighsModelStatus
    assert [termination_name(x) for x in (s.kOptimal, s.kInfeasible, s.kTimeLimit)] == [
        "optimal", "infeasible", "maxTimeLimit"]
    assert termination_name(s.kUnbounded) == "Unbounded"


def test_csc_arrays_to_a_highs_model() -> None:
    lp = highs_lp(np.array([1.0, 1.0]), np.array([1.0, 1.0]), np.array([1.0]),
                  np.array([np.inf]), np.array([0, 1, 2], dtype=np.int32),
                  np.array([0, 0], dtype=np.int32), np.array([1.0, 1.0]),
                  integral=np.array([False, False]))
    assert (lp.num_col_, lp.num_row_) == (2, 1) and len(lp.integrality_) == 0
    res = solve(new_highs(), lp)
    assert res.optimal and res.objective == pytest.approx(1.0)


@pytest.mark.slow
def test_the_first_highs_prints_no_banner_on_stdout() -> None:
    # The CLI's --json output must stay clean: HiGHS prints its banner at the first Highs().
    code = ("from workbench.optim.highs import new_highs, solve\n"
            "import numpy as np\n"
            "from workbench.optim.highs import SparseLp\n"
            "lp = SparseLp(); lp.add_columns('x', np.ones(1)); lp.set_cost('x', 1.0)\n"
            "assert solve(new_highs(), lp.highs_lp()).optimal\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout == ""


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every ``from ... import`` and ``import`` in a file."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


@pytest.mark.parametrize("path", sorted((WORKBENCH / "optim").glob("*.py")),
                         ids=lambda p: p.name)
def test_the_optim_layer_imports_nothing_above_it(path: Path) -> None:
    above = ("workbench.policies", "workbench.sim", "workbench.cli", "workbench.app",
             "workbench.runs", "workbench.sweep", "workbench.metrics", "workbench.store")
    bad = [m for m, _ in _imports(path) if m.startswith(above)]
    assert not bad, f"{path.name} imports {bad} (the optim layer sits below the policies)"


def test_no_policy_or_solver_module_imports_a_private_name() -> None:
    files = sorted((WORKBENCH / "optim").glob("*.py")) + sorted(
        (WORKBENCH / "policies").glob("*.py"))
    bad = [(p.name, m, n) for p in files for m, names in _imports(p)
           if m.startswith("workbench") for n in names if n.startswith("_")
           and not n.startswith("__")]
    # ``GLOBAL as _GLOBAL``-style aliases are fine: only the imported name counts.
    assert not bad, f"private names imported across modules: {bad}"


_DEGENERATE = r"""
import itertools, sys
import numpy as np
from workbench.optim.highs import Basis, Coords, SparseLp, get_basis, new_highs, solve

def model(n_cols, n_rows, entries, upper):
    lp = SparseLp()
    lp.add_columns("x", np.full(n_cols, upper))
    if n_cols:
        lp.set_cost("x", 1.0 + np.arange(n_cols))
    r = np.arange(n_rows) if entries and n_cols else np.zeros(0, dtype=np.int64)
    lp.add_rows("r", Coords.grid(row=n_rows), r % max(n_cols, 1), np.ones(r.size), -np.inf,
                4.0, row=r)
    return lp

for n_cols, n_rows, entries, upper, presolve, warm in itertools.product(
        (0, 1, 3), (0, 1, 20), (False, True), (0.0, 1.0, np.inf), (None, False), (False, True)):
    print(n_cols, n_rows, entries, upper, presolve, warm, flush=True)
    lp = model(n_cols, n_rows, entries, upper)
    h = new_highs(presolve=presolve)
    lp.pass_to(h)
    start = (Basis(np.zeros(n_cols, np.int8), np.ones(n_rows, np.int8)) if warm else None)
    res = solve(h, basis=start)
    got = get_basis(h, lp, res.x, res.row_value)
    wrong = Basis(np.zeros(n_cols + 1, np.int8), np.ones(max(n_rows - 1, 0), np.int8))
    assert solve(h, basis=wrong).status == res.status  # a basis of another model: ignored
    if got is not None:
        assert got.col_status.shape == (n_cols,) and got.row_status.shape == (n_rows,)
        assert set(got.col_status.tolist()) | set(got.row_status.tolist()) <= {0, 1, 2}
print("all read")
"""


def test_a_basis_is_read_from_degenerate_models_without_dying() -> None:
    """Models with no rows, no columns, no entries, fixed columns, solved cold or warm, with
    presolve or without: reading the basis never kills the process (``getBasicVariables``
    on a model presolve solved outright, with HiGHS's alien basis, died with SIGSEGV: a
    window LP with one fixed column and pool rows without entries). In a subprocess, so
    that a crash fails this test and names the model instead of ending the run."""
    proc = subprocess.run([sys.executable, "-c", _DEGENERATE], capture_output=True, text=True,
                          timeout=300)
    last = proc.stdout.strip().splitlines()[-1:] or ["(nothing)"]
    assert proc.returncode == 0, f"died ({proc.returncode}) at model {last[0]}: {proc.stderr}"
    assert last == ["all read"]


def test_rows_addressed_by_labels_are_the_rows_of_their_flat_keys() -> None:
    # Pool p, block b of a (3 pools x 4 blocks) grid is row p * 4 + b; a unique set of
    # (job, block) pairs is sorted like the pairs' flat keys.
    rng = np.random.default_rng(0)
    pool, block = rng.integers(0, 3, 20), rng.integers(0, 4, 20)
    grid = Coords.grid(pool=3, block=4)
    np.testing.assert_array_equal(grid.locate(pool=pool, block=block), pool * 4 + block)
    np.testing.assert_array_equal(grid.label("block"), np.tile(np.arange(4), 3))
    pairs = Coords.unique(job=pool, block=block)
    np.testing.assert_array_equal(pairs.label("job") * 4 + pairs.label("block"),
                                  np.unique(pool * 4 + block))
    np.testing.assert_array_equal(pairs.locate(job=pairs.label("job"),
                                               block=pairs.label("block")),
                                  np.arange(pairs.size))
    assert (Coords.of(job=np.array([2, 0])).locate(job=np.array([0, 1, 2, 7]))
            == [1, -1, 0, -1]).all()
    by_label, by_key = SparseLp(), SparseLp()
    for lp in (by_label, by_key):
        lp.add_columns("x", np.ones(20))
    by_label.add_rows("pool", grid, np.arange(20), np.ones(20), -np.inf, 2.0,
                      pool=pool, block=block)
    by_key.add_rows("pool", Coords.grid(row=12), np.arange(20), np.ones(20), -np.inf, 2.0,
                    row=pool * 4 + block)
    assert (by_label.matrix() != by_key.matrix()).nnz == 0
    # Read back shaped by the dimensions.
    assert by_label.row_values("pool", np.arange(12.0)).shape == (3, 4)
    assert by_label.row_values("pool", np.arange(12.0))[2, 1] == 9.0
    with pytest.raises(ValueError, match="outside its rows"):
        by_label.add_rows("bad", grid, np.array([0]), np.ones(1), 0.0, 1.0,
                          pool=np.array([3]), block=np.array([0]))
    with pytest.raises(ValueError, match="dimensions"):
        grid.locate(pool=pool)
    with pytest.raises(KeyError):
        by_label.col("x", entry=np.array([20]))
