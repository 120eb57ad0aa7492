"""workbench.runs: knob lines of stored runs."""

from __future__ import annotations


def test_knobs_text_keeps_small_caps() -> None:
    """A 0.4 kg cap reads 0.4 kg, not 0 kg; large caps stay whole kg."""
    from workbench.runs import knobs_text

    assert "carbon cap 0.4 kg" in knobs_text({"policy": "lyapunov",
                                              "knobs": {"carbon_cap_kg": 0.4}})
    text = knobs_text({"policy": "lyapunov", "knobs": {"carbon_cap_kg": {"a": 1234.5, "b": 2.25}}})
    assert "a 1,234 kg" in text and "b 2.25 kg" in text
