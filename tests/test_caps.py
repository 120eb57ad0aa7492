"""The caps record: validated once, read as the policies' knobs."""

from __future__ import annotations

import math

import pytest

from workbench.caps import Caps


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"carbon_kg": -1.0}, "carbon cap must be a positive finite number of kg CO2"),
    ({"carbon_kg": math.nan}, "carbon cap must be a positive"),
    ({"carbon_kg": math.inf}, "carbon cap must be a positive"),
    ({"power_kw": 0.0}, "power cap must be a positive finite number of kW"),
    ({"carbon_kg_by_dc": {"a": -3.0}}, "carbon cap of a"),
    ({"power_kw_by_dc": {"b": math.nan}}, "power cap of b"),
    ({"carbon_pct_below_baseline": 100.0}, r"percentage must be in \[0, 100\)"),
    ({"carbon_kg": 1.0, "carbon_pct_below_baseline": 5.0}, "give one carbon cap"),
    ({"power_kw": 1.0, "power_kw_by_dc": {"a": 1.0}}, "give one power cap"),
])
def test_bad_caps_are_one_line_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Caps(**kwargs)


def test_unknown_datacenters_are_named_with_the_known_ones() -> None:
    caps = Caps(carbon_kg_by_dc={"a": 1.0, "nowhere": 2.0}, power_kw_by_dc={"a": 3.0})
    with pytest.raises(ValueError, match="carbon cap for unknown datacenter.*nowhere.*has a, b"):
        caps.check_names(["a", "b"])
    caps.check_names(["a", "b", "nowhere"])


def test_knobs_round_trip_and_percentages_resolve() -> None:
    for carbon, power in ((12.5, None), ({"a": 1.0, "b": 2.0}, 7.0), (None, {"a": 4.0})):
        caps = Caps.from_knobs(carbon, power)
        knobs = caps.knobs()
        assert knobs.get("carbon_cap_kg") == carbon and knobs.get("power_cap_kw") == power
        assert Caps.from_knobs(**{"carbon_cap_kg": knobs.get("carbon_cap_kg"),
                                  "power_cap_kw": knobs.get("power_cap_kw")}) == caps
    pct = Caps(carbon_pct_below_baseline=20.0, power_kw=5.0)
    with pytest.raises(ValueError, match="resolve the percentage"):
        pct.knobs()
    done = pct.resolved(200.0)
    assert done.carbon_kg == pytest.approx(160.0) and done.power_kw == 5.0
    assert Caps(carbon_kg_by_dc={"a": 1.0, "b": 2.5}).carbon_total_kg() == 3.5
    assert pct.power_only() == Caps(power_kw=5.0)
    assert len({Caps(), Caps(), Caps(carbon_kg=1.0)}) == 2


def test_parse_and_label() -> None:
    assert Caps.parse_carbon(None) == Caps()
    assert Caps.parse_carbon(" none ") == Caps()
    assert Caps.parse_carbon("1200").label == "1200 kg"
    assert Caps.parse_carbon("20%", power_kw=8.0).label == "20%; 8 kW"
    with pytest.raises(ValueError, match="percentage below asap-home"):
        Caps.parse_carbon("lots")


def test_kg_text_keeps_small_budgets_readable() -> None:
    from workbench.caps import kg_text

    assert kg_text(1234.56) == "1,234.6" and kg_text(10.0) == "10.0"
    assert kg_text(0.04386) == "0.0439" and kg_text(0.0) == "0"
