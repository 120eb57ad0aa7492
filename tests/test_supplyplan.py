"""The look-ahead's supply plan as the slot decision reads it: the own supply of a balanced
site in a slot, and the slot problem with that supply and the grid as two tiers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_policies import problem

from workbench.optim.slotpyomo import solve_slot_problem
from workbench.policies.supplyplan import SupplyPlan, own_supply_problem
from workbench.supply import Battery

H = 0.25  # hours per slot


def _plan() -> SupplyPlan:
    """One balanced site ``a`` (2 kW of renewables in slot 0, none in slot 1, a battery
    the plan charges by 0.2 kWh in slot 0 and discharges by 0.1 kWh in slot 1)."""
    return SupplyPlan(
        names=("a",), t0=0, block_start=np.array([0, 1]), block_len=np.array([1, 1]),
        battery_kwh=np.array([[-0.2, 0.1]]), grid_kwh=np.zeros((1, 2)),
        value=np.array([[0.0, 0.5]]), peak_kw={}, lines=(), base_kw=np.zeros(1),
        source_site=np.array([0]), renewable_kw=np.array([[2.0], [0.0]]), slot_h=H,
        battery=np.array([True]))


@pytest.mark.parametrize(("t", "soc", "expect"), [
    # 2 kW x 0.25 h + min(1 kW x 0.25 h, (1.0 - 0.2) x 0.9) - the plan's 0.2 kWh of charge
    (0, 1.0, 0.5 + 0.25 - 0.2),
    # the battery nearly at its floor: (0.21 - 0.2) x 0.9; no sun; the plan discharges
    (1, 0.21, 0.009),
    (1, 0.2, 0.0),
])
def test_own_supply_by_hand(t: int, soc: float, expect: float) -> None:
    bat = Battery("bat", "a", energy_kwh=2.0, power_kw=1.0, round_trip_efficiency=0.81,
                  soc_min=0.1)
    got = _plan().own_supply_kwh(t, {"a": soc}, {"a": bat})
    assert got == {"a": pytest.approx(expect)}


def test_two_tiers_fill_the_own_supply_first_and_buy_the_grid_where_it_pays() -> None:
    # Jobs j0, j1 at balanced site d0 (3 kWh a slot each; the plan's value of energy 0 there,
    # the grid 0.3), j2 at d1 (not balanced). The own supply gives 4 kWh: one job.
    prob = problem([0, 1, 2], [1.0, 0.5, 0.2], [0, 0, 1], [1, 1, 1], [8, 8],
                   [False, False, False])
    keep = np.array([True, True, False])
    tiered, tkeep, origin = own_supply_problem(
        prob, keep, np.array([3.0, 3.0, 1.0]), {"d0": 0.0}, {"d0": 0.3, "d1": 0.3},
        {"d0": 4.0})
    assert origin.tolist() == [0, 1, 2, 0, 1]
    assert tkeep.tolist() == [True, True, False, True, True]
    assert tiered.supply_labels == ("d0",)
    assert tiered.supply_index.tolist() == [0, 0, -1, -1, -1]
    assert tiered.supply_kwh.tolist() == [3.0, 3.0, 0.0, 0.0, 0.0]
    assert tiered.supply_cap_kwh.tolist() == [4.0]
    # The grid copies pay 0.3 a kWh more: 1.0 - 0.9 = 0.1 and 0.5 - 0.9 = -0.4.
    np.testing.assert_allclose(tiered.coef, [1.0, 0.5, 0.2, 0.1, -0.4])
    choice, _ = solve_slot_problem(tiered.subset(tkeep), mip_rel_gap=0.0)
    assert choice is not None
    # j0 on the own supply (1.0) and j1 left waiting beats j1 on it (0.5) and j0 on the
    # grid (0.1); without the tiers both would run on "free" energy.
    assert origin[np.flatnonzero(tkeep)[choice]].tolist() == [0]


def test_no_tiers_where_the_plan_values_energy_at_the_grid_price_or_above() -> None:
    prob = problem([0, 1], [1.0, 1.0], [0, 1], [1, 1], [8, 8], [False, False])
    keep = np.ones(2, dtype=bool)
    for value in (0.3, 5.0):  # the grid is the marginal source, or a peak's demand charge
        tiered, tkeep, origin = own_supply_problem(
            prob, keep, np.ones(2), {"d0": value}, {"d0": 0.3}, {"d0": 4.0})
        assert tiered is prob and tkeep is keep and origin.tolist() == [0, 1]
