"""The supply part of the block LP: a supply plan's carbon counted per budget group as its
carbon rows count it."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.optim.supplylp import SupplyBlock, SupplySolution


def _block(group: list[int] | None) -> SupplyBlock:
    """Three sites, two blocks; a source at sites 0 and 2."""
    s, b = 3, 2
    z = np.zeros(s)
    return SupplyBlock(
        site_dc=np.arange(s), grid_cost=np.ones((b, s)),
        grid_carbon_kg=np.array([[0.5, 0.2, 0.1], [0.4, 0.2, 0.3]]),
        source_site=np.array([0, 2]), available_kwh=np.ones((b, 2)),
        source_cost=np.zeros(2), source_carbon_kg=np.array([0.01, 0.02]),
        export_price=np.full(s, np.nan), battery=np.zeros(s, dtype=bool), power_kwh=z,
        eta=np.ones(s), soc0=z, soc_lo=z, soc_hi=z, terminal_value=z,
        line_site=np.zeros(0, dtype=np.int64), line_price=np.zeros(0),
        line_floor_kw=np.zeros(0), line_blocks=(), base_kw=z, slot_h=1.0,
        carbon_group=None if group is None else np.array(group))


def _solution() -> SupplySolution:
    z = np.zeros((3, 2))
    return SupplySolution(grid=np.array([[10.0, 20.0], [5.0, 0.0], [1.0, 2.0]]),
                          ren=np.array([[100.0, 0.0], [50.0, 50.0]]), export=z, charge=z,
                          discharge=z, soc=z, peak_kw=np.zeros(0), energy_value=z)


@pytest.mark.parametrize(("group", "want"), [
    # site 0: 10*0.5 + 20*0.4 + 100*0.01 = 14; site 1: 5*0.2 = 1; site 2: 0.1 + 0.6 + 2 = 2.7
    ([0, 1, 0], [16.7, 1.0]),
    ([1, -1, 1], [0.0, 16.7]),
    (None, [0.0, 0.0]),
])
def test_carbon_by_group_adds_each_sites_grid_and_sources(group: list[int] | None,
                                                          want: list[float]) -> None:
    sb, sol = _block(group), _solution()
    got = sol.carbon_kg_by_group(sb, 2)
    assert got.tolist() == pytest.approx(want)
    if group is not None and min(group) >= 0:
        assert got.sum() == pytest.approx(sol.carbon_kg(sb))


def test_import_beyond_a_limit_counts_in_the_carbon_rows_as_import() -> None:
    """``over`` (import beyond a grid limit, kept in the plan at a high weight) is metered as
    import: the carbon rows count it at the grid's kg per kWh, as the solution's carbon
    does."""
    from workbench.optim.highs import SparseLp
    from workbench.optim.supplylp import add_columns, carbon_entries

    sb = _block([0, 1, 0])
    lp = SparseLp()
    cap = np.array([[np.inf, np.inf], [3.0, np.inf], [np.inf, 1.0]])  # limits at 2 site-blocks
    add_columns(lp, sb, np.array([1, 1]), grid_cap_kwh=cap)
    group, col, kg = carbon_entries(lp, sb)
    over = set(lp.col("over", site=np.array([1, 2]), block=np.array([0, 1])).tolist())
    got = {c: (g, k) for g, c, k in zip(group.tolist(), col.tolist(), kg.tolist(), strict=True)
           if c in over}
    assert sorted(got.values()) == [(0, 0.3), (1, 0.2)]
