"""Plan and migrations CSV: exact schema, ISO-8601 UTC times, lossless round trip."""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest
from helpers_sim import inference, tiny_scenario, training
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.forecast import default_forecast_mode
from workbench.io.plan_csv import (
    FORMULA_PREFIXES,
    MIGRATION_COLUMNS,
    PLAN_COLUMNS,
    PlanCsvError,
    atomic_write,
    neutralise_cell,
    normalise_migrations,
    normalise_plan,
    read_migrations_csv,
    read_plan_csv,
    restore_cell,
    write_migrations_csv,
    write_plan_csv,
)
from workbench.policies.base import Allocation, Placement
from workbench.sim import simulate

T0 = pd.Timestamp("2025-07-01T00:00:00Z")


def plan_frame() -> pd.DataFrame:
    return pd.DataFrame([
        {"slot_start": T0, "slot_end": T0 + pd.Timedelta(minutes=15), "job_id": "j",
         "region": "guangzhou", "gpu_type": "A100", "n_gpus": 4, "batch_size": 512,
         "action": "start", "energy_kwh": 0.1 + 0.2, "cost": 1 / 3, "carbon_kg": 2e-7,
         "price_per_kwh": 0.65, "carbon_g_per_kwh": 512.25, "progress": 0.123456789012345,
         "transfer_gb": 144.0, "lost_s": 235.2, "slot": 0},
        {"slot_start": T0 + pd.Timedelta(minutes=15), "slot_end": T0 + pd.Timedelta(minutes=30),
         "job_id": "j", "region": "guangzhou", "gpu_type": "", "n_gpus": 0, "batch_size": 0,
         "action": "pause", "energy_kwh": 0.0, "cost": 0.0, "carbon_kg": 0.0,
         "price_per_kwh": 1.1, "carbon_g_per_kwh": 500.0, "progress": 0.0,
         "transfer_gb": 0.0, "lost_s": 0.0, "slot": 1},
    ])


def test_plan_header_is_exact_and_times_are_iso_utc() -> None:
    buf = io.StringIO()
    write_plan_csv(plan_frame(), buf)
    lines = buf.getvalue().splitlines()
    assert lines[0] == ",".join(PLAN_COLUMNS)
    assert lines[1].startswith("2025-07-01T00:00:00Z,2025-07-01T00:15:00Z,j,guangzhou,A100,4,")
    assert lines[2].split(",")[3:8] == ["guangzhou", "", "0", "0", "pause"]
    assert "slot" not in lines[0].split(",")[2:]  # extras are left out


def test_plan_round_trip_keeps_15_digits_and_drops_float_noise() -> None:
    """Issue 24 item 8: 0.1 + 0.2 (0.30000000000000004) is written 0.3; every value reads
    back within one part in 10^15."""
    buf = io.StringIO()
    write_plan_csv(plan_frame(), buf)
    back = read_plan_csv(io.StringIO(buf.getvalue()))
    pd.testing.assert_frame_equal(back, normalise_plan(plan_frame()), rtol=1e-15, atol=0)
    assert str(back["slot_start"].dt.tz) == "UTC"
    assert back.loc[0, "energy_kwh"] == 0.3 and ",0.3," in buf.getvalue()
    assert "0.30000000000000004" not in buf.getvalue()


@pytest.mark.parametrize(("value", "text"), [
    (0.1 + 0.08, "0.18"), (2.0, "2.0"), (1e-20, "1e-20"), (123456.789, "123456.789"),
    (1 / 3, "0.333333333333333"), (-0.5, "-0.5"), (float("inf"), "inf"),
])
def test_float_text(value: float, text: str) -> None:
    from workbench.io.plan_csv import float_text

    assert float_text(value) == text


def test_migrations_round_trip_keeps_missing_gain() -> None:
    mig = pd.DataFrame([
        {"slot_start": T0, "job_id": "j", "from_region": "guangzhou", "to_region": "guiyang",
         "checkpoint_gb": 4.0, "dataset_gb": 0.0, "transfer_gb": 4.0, "transfer_s": 0.32,
         "moved": "checkpoint", "expected_gain": 0.25, "reason": "cheaper, cleaner"},
        {"slot_start": T0, "job_id": "k", "from_region": "a", "to_region": "b",
         "checkpoint_gb": 0.0, "dataset_gb": 144.0, "transfer_gb": 144.0, "transfer_s": 11.52,
         "moved": "dataset", "expected_gain": math.nan, "reason": ""},
    ])
    buf = io.StringIO()
    write_migrations_csv(mig, buf)
    assert buf.getvalue().splitlines()[0] == ",".join(MIGRATION_COLUMNS)
    assert '"cheaper, cleaner"' in buf.getvalue()
    back = read_migrations_csv(io.StringIO(buf.getvalue()))
    pd.testing.assert_frame_equal(back, normalise_migrations(mig))
    assert math.isnan(back.loc[1, "expected_gain"])


def test_schema_errors_say_what_is_wrong() -> None:
    with pytest.raises(PlanCsvError, match="lacks the columns"):
        write_plan_csv(plan_frame().drop(columns=["progress"]), io.StringIO())
    bad = plan_frame()
    bad.loc[0, "action"] = "teleport"
    with pytest.raises(PlanCsvError, match="unknown plan actions"):
        write_plan_csv(bad, io.StringIO())
    with pytest.raises(PlanCsvError, match="expected exactly"):
        read_plan_csv(io.StringIO("job_id,slot_start\nj,2025-07-01T00:00:00Z\n"))


class Mover:
    name = "mover"

    def reset(self, scenario) -> None:
        return None

    def decide(self, state, forecast) -> Allocation:
        where = "a" if state.t == 0 else "b"
        placements = {js.job.job_id: Placement(where, "A100", 1, 128) for js in state.jobs
                      if js.job.is_training}
        return Allocation(placements=placements, expected_gain={"j": 0.4},
                          reasons={"j": "cheaper in b"})


def test_simulated_plan_and_migrations_round_trip(tmp_path) -> None:
    sc = tiny_scenario([training("j", slots_of_work=2.0), inference("svc", last=2)], n_slots=3)
    res = simulate(sc, Mover(), forecast_mode=default_forecast_mode(sc))
    write_plan_csv(res.plan, tmp_path / "plan.csv")
    write_migrations_csv(res.migrations, tmp_path / "mig.csv")
    plan = read_plan_csv(tmp_path / "plan.csv")
    pd.testing.assert_frame_equal(plan, normalise_plan(res.plan))
    assert set(plan["action"]) <= {"start", "run", "migrate", "pause", "resume", "finish"}
    mig = read_migrations_csv(tmp_path / "mig.csv")
    assert mig[["job_id", "from_region", "to_region", "expected_gain", "reason"]].values.tolist() \
        == [["j", "a", "b", 0.4, "cheaper in b"]]


# -- spreadsheet formula injection and atomic files ------------------------------------------


@pytest.mark.parametrize("name", ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0",
                                  "@SUM(1+1)", "-2+3", "\tx", "\rx", "'quoted"])
def test_text_cells_are_neutralised_and_restored(name: str) -> None:
    frame = plan_frame().assign(job_id=name, region=name)
    buf = io.StringIO()
    write_plan_csv(frame, buf)
    raw = pd.read_csv(io.StringIO(buf.getvalue()), dtype=str, keep_default_na=False)
    assert (raw["job_id"] == "'" + name).all() and (raw["region"] == "'" + name).all()
    assert raw["energy_kwh"].iloc[0] == "0.3"  # numbers untouched (but their float noise)
    back = read_plan_csv(io.StringIO(buf.getvalue()))
    pd.testing.assert_frame_equal(back, normalise_plan(frame), rtol=1e-15)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from("=+-@\t\r'aZ0 ,\"|"), max_size=8))
def test_any_name_round_trips_and_never_starts_a_formula(name: str) -> None:
    frame = plan_frame().assign(job_id=name)
    buf = io.StringIO()
    write_plan_csv(frame, buf)
    raw = pd.read_csv(io.StringIO(buf.getvalue()), dtype=str, keep_default_na=False)
    assert not raw["job_id"].iloc[0].startswith(FORMULA_PREFIXES)
    assert read_plan_csv(io.StringIO(buf.getvalue()))["job_id"].iloc[0] == name
    assert restore_cell(neutralise_cell(name)) == name


def test_migrations_text_is_neutralised(tmp_path) -> None:
    mig = pd.DataFrame([{"slot_start": T0, "job_id": "=1+1", "from_region": "@a",
                         "to_region": "b", "checkpoint_gb": 1.0, "dataset_gb": 0.0,
                         "transfer_gb": 1.0, "transfer_s": 2.0, "moved": "checkpoint",
                         "expected_gain": -0.5, "reason": "+x"}])
    path = tmp_path / "m.csv"
    write_migrations_csv(mig, path)
    assert "'=1+1,'@a,b,1.0,0.0,1.0,2.0,checkpoint,-0.5,'+x" in path.read_text()
    pd.testing.assert_frame_equal(read_migrations_csv(path), normalise_migrations(mig))


def test_every_text_dtype_is_neutralised() -> None:
    """Object, string and categorical columns alike (a categorical was written raw)."""
    from workbench.io.plan_csv import write_csv

    frame = pd.DataFrame({"cat": pd.Categorical(["=1+1", "x"]), "n": [-1, 2],
                          "s": pd.array(["@x", "y"], dtype="string"), "o": ["-2", "z"]})
    buf = io.StringIO()
    write_csv(frame, buf)
    assert buf.getvalue().splitlines() == ["cat,n,s,o", "'=1+1,-1,'@x,'-2", "x,2,y,z"]


def test_an_atomic_file_gets_the_mode_of_a_plain_one(tmp_path) -> None:
    """Not mkstemp's owner-only 0600: a new file gets 0666 less the umask, a replaced one
    keeps its mode."""
    import os

    from workbench.io.plan_csv import atomic_write

    old = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "new.csv") as fh:
            fh.write("x\n")
        assert (tmp_path / "new.csv").stat().st_mode & 0o777 == 0o644
        (tmp_path / "new.csv").chmod(0o640)
        with atomic_write(tmp_path / "new.csv") as fh:
            fh.write("y\n")
        assert (tmp_path / "new.csv").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_atomic_write_keeps_the_old_file_on_error(tmp_path) -> None:
    path = tmp_path / "plan.csv"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_write(path) as fh:
        fh.write("half a ")
        raise RuntimeError("killed")
    assert path.read_text() == "old\n" and list(tmp_path.iterdir()) == [path]
    write_plan_csv(plan_frame(), path)
    assert len(read_plan_csv(path)) == 2 and list(tmp_path.iterdir()) == [path]
