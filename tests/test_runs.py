"""workbench.runs: knob lines of stored runs."""

from __future__ import annotations


def test_knobs_text_keeps_small_caps() -> None:
    """A 0.4 kg cap reads 0.4 kg, not 0 kg; large caps stay whole kg."""
    from workbench.runs import knobs_text

    assert "carbon cap 0.4 kg" in knobs_text({"policy": "lyapunov",
                                              "knobs": {"carbon_cap_kg": 0.4}})
    text = knobs_text({"policy": "lyapunov", "knobs": {"carbon_cap_kg": {"a": 1234.5, "b": 2.25}}})
    assert "a 1,234 kg" in text and "b 2.25 kg" in text


def test_knobs_text_names_the_model_forecast_and_its_revision() -> None:
    from workbench.runs import knobs_text

    settings = {"forecast_mode": "model", "forecast_model": "auto", "forecast_revise": "band"}
    assert "forecast model (auto, revised beyond its band)" in knobs_text(
        {"policy": "lookahead", "settings": settings})
    assert "forecast model (lear, as issued)" in knobs_text(
        {"policy": "lookahead", "settings": {**settings, "forecast_model": "lear",
                                             "forecast_revise": "none"}})
    # A run stored before the forecaster was recorded reads as before.
    assert knobs_text({"policy": "lookahead", "settings": {"forecast_mode": "model"}}
                      ).endswith("forecast model")
