"""Predicted profiles for the planner; fits to stored measurements override them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.compute.measure import StepMeasurement, save_measurement
from workbench.fit import EnergyFit
from workbench.perf import (
    iteration_time,
    load_default_profiles,
    profile_from_dict,
    profile_to_dict,
)
from workbench.profiles import predict_profile, profile_from_measurements
from workbench.store import Store


def _shipped(app: str, gpu: str):  # noqa: ANN202
    return next(p for p in load_default_profiles() if p.app == app and p.gpu_type == gpu)


def test_shipped_unmeasured_profiles_are_predicted_with_an_interval() -> None:
    for p in load_default_profiles():
        assert p.derived and p.predicted and p.source.startswith("throughput: predicted")
        lo, hi = p.step_time_interval  # type: ignore[misc]
        assert 0 < lo < 1 < hi


def test_predict_profile_follows_the_predictor() -> None:
    import numpy as np

    from workbench.compute import BUILTIN_DEVICES, load_coefficients, load_graph
    from workbench.fit import placement_iteration_time
    from workbench.profiles import predicted_timings

    base = _shipped("imagenet", "A100")
    energy: EnergyFit | None = None
    prof = predict_profile("imagenet", base.efficiency, energy, "A100")
    rows = predicted_timings(load_graph("imagenet"), BUILTIN_DEVICES["A100"],
                             load_coefficients(), prof.efficiency.max_local_batch, 8)
    got = placement_iteration_time(prof.throughput, rows["num_nodes"], rows["num_replicas"],
                                   rows["local_bsz"])
    ape = np.abs(got - rows["step_time"]) / rows["step_time"]
    assert float(np.median(ape)) < 0.10  # the Pollux form summarises the predictions
    assert prof.energy.max_power_w == 400.0 and prof.predicted


def test_interval_survives_json_and_the_store(tmp_path: Path) -> None:
    p = _shipped("bert", "H800")
    assert profile_from_dict(json.loads(json.dumps(profile_to_dict(p)))) == p
    with Store(tmp_path / "s.duckdb") as store:
        store.save_profiles([p])
        assert store.load_profiles() == [p]


def test_stored_measurements_override_the_prediction(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.cli import main

    base = _shipped("cifar10", "A100")
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        assert profile_from_measurements(store, base) is None
        for b in (32, 64, 128, 256):
            save_measurement(store, StepMeasurement("cifar10", "A100", gpus=1, local_batch=b,
                                                    step_time_s=0.004 + 1e-4 * b, steps=100))
    assert main(["--db", str(db), "compute", "fit", "--app", "cifar10", "--gpu", "a100"]) == 0
    assert "fitted to 4 stored measurements" in capsys.readouterr().out
    with Store(db) as store:
        (prof,) = [p for p in store.load_profiles() if (p.app, p.gpu_type) == ("cifar10", "A100")]
    assert not prof.derived and not prof.predicted
    assert float(iteration_time(prof.throughput, 1, 128)) == pytest.approx(0.0168, rel=0.05)
    assert main(["--db", str(db), "compute", "fit", "--app", "bert", "--gpu", "A100"]) == 2
    assert "fewer than 3 stored measurements" in capsys.readouterr().err


def test_profiles_written_under_the_old_sync_names_are_read_swapped(tmp_path: Path) -> None:
    """Before the sync terms took Pollux's names (``alpha_n, beta_n`` inter-node), the two
    pairs were the other way round: a version-1 document and a stored profile without the
    ``sync_names`` mark are read with them swapped, so the same placement takes as long."""
    from workbench.perf import profiles_from_json

    p = _shipped("bert", "H800")
    tp = p.throughput
    old = profile_to_dict(p)
    old["throughput"] |= {"alpha_n": tp.alpha_r, "beta_n": tp.beta_r,
                          "alpha_r": tp.alpha_n, "beta_r": tp.beta_n}
    assert profiles_from_json({"schema_version": 1, "profiles": [old]}) == [p]
    with Store(tmp_path / "s.duckdb") as store:
        store.save_profiles([p])
        params = json.loads(store.con.execute("SELECT params FROM profiles").fetchone()[0])
        assert params.pop("sync_names") == "pollux"
        params["throughput"] = old["throughput"]
        store.con.execute("UPDATE profiles SET params = ?", [json.dumps(params)])
        assert store.load_profiles() == [p]
    assert tp.alpha_n > tp.alpha_r  # crossing nodes costs more than staying in one
