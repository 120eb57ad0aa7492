"""Columnar accumulation of run rows (workbench.chunks) and the simulator that streams into
it: the same plan, queues and metrics whatever the chunk size, and as the row form gave."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from helpers_sim import inference, tiny_scenario, training
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import chunks
from workbench.chunks import ColumnChunks, QueueTrace
from workbench.forecast import default_forecast_mode
from workbench.metrics import attribute_savings, compute_metrics, queue_kind_totals
from workbench.policies import make_policy
from workbench.recorders import MemoryRecorder
from workbench.schema import PLAN_EXTRA_COLUMNS, PLAN_STORED_COLUMNS
from workbench.sim import simulate

ROW = st.tuples(st.sampled_from(["a", "b", "job-7"]), st.integers(-5, 1000),
                st.floats(allow_nan=True, allow_infinity=False, width=64))


@settings(max_examples=30, deadline=None)
@given(slots=st.lists(st.lists(ROW, max_size=6), max_size=12), chunk=st.integers(1, 9))
def test_chunks_hold_the_rows_as_a_frame_of_the_rows_would(slots: list, chunk: int) -> None:
    buf = ColumnChunks({"name": object, "n": np.int64, "x": np.float64}, chunk_rows=chunk)
    for rows in slots:
        buf.extend({"name": [r[0] for r in rows], "n": [r[1] for r in rows],
                    "x": [r[2] for r in rows]})
    rows = [dict(zip(("name", "n", "x"), r, strict=True)) for s in slots for r in s]
    assert len(buf) == len(rows)
    got = buf.frame()
    want = pd.DataFrame(rows, columns=["name", "n", "x"])
    if rows:
        want = want.astype({"n": np.int64, "x": np.float64})
        pd.testing.assert_frame_equal(got, want)
    else:
        assert list(got.columns) == ["name", "n", "x"] and got.empty


def test_chunks_refuse_ragged_columns_and_infer_types_when_asked() -> None:
    buf = ColumnChunks({"a": None, "b": None}, chunk_rows=2)
    with pytest.raises(ValueError, match="column 'b' has 1 values, expected 2"):
        buf.extend({"a": [1, 2], "b": [1.0]})
    buf.extend({"a": [1, 2], "b": ["x", "y"]})
    buf.extend({"a": [3.5], "b": [True]})
    f = buf.frame()
    assert f["a"].tolist() == [1.0, 2.0, 3.5] and f["a"].dtype == np.float64
    assert f["b"].tolist() == ["x", "y", True]


def test_text_cells_are_kept_as_objects_never_padded_to_the_longest() -> None:
    """A column of text (a look-ahead's per-slot queue JSON) is made objects directly: numpy's
    fixed-width strings would pad every cell to the longest one, 4 bytes a character (here
    2,001 cells x 100,000 characters: 800 MB for a moment; over the whole Philly trace
    2.5 GB at the end of the run)."""
    import tracemalloc

    buf = ColumnChunks({"slot": None, "queues": None})
    buf.extend({"slot": list(range(2001)), "queues": ["x" * 100_000] + ["{}"] * 2000})
    tracemalloc.start()
    try:
        f = buf.frame()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f["slot"].dtype.kind == "i"
    assert f["queues"].iloc[0] == "x" * 100_000 and f["queues"].iloc[1] == "{}"
    assert peak < 5 * 2**20, f"{peak / 2**20:.0f} MB to build the frame"


QUEUES = st.dictionaries(st.sampled_from(["Z:a", "Z:b", "mu:j1", "mu:j2", "R:x", "free"]),
                         st.floats(-1e3, 1e3), max_size=6)


@settings(max_examples=30, deadline=None)
@given(per_slot=st.lists(QUEUES, max_size=10), chunk=st.integers(1, 5))
def test_queue_trace_is_the_wide_table_and_its_kind_totals(per_slot: list, chunk: int) -> None:
    trace = QueueTrace(chunk_rows=chunk)
    for t, q in enumerate(per_slot):
        trace.add(t, q)
    want = pd.DataFrame(per_slot, index=pd.RangeIndex(len(per_slot), name="slot"))
    got = trace.frame()
    pd.testing.assert_frame_equal(got, want.astype(float), check_column_type=False)
    totals = trace.kind_totals()
    expected = queue_kind_totals(want)
    assert list(totals.columns) == list(expected.columns)
    np.testing.assert_allclose(totals.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-9)
    for name in ("Z:a", "unknown"):
        s = trace.series(name)
        np.testing.assert_array_equal(s.to_numpy(), want[name].to_numpy(float) if name in want
                                      else np.full(len(per_slot), np.nan))


def _scenario() -> object:
    jobs = [training(f"j{i}", home="ab"[i % 2], arrival_slot=i % 5, slots_of_work=1.5 + i % 3,
                     deadline_slot=6 + i % 3) for i in range(6)]
    return tiny_scenario(jobs + [inference("svc", first=1, last=6)], n_slots=8,
                         price_a=[1.0, 0.2, 1.0, 0.5] * 2, gpus_a=3, gpus_b=2)


@pytest.mark.parametrize("policy", ["asap-home", "lookahead"])
def test_streamed_run_is_independent_of_the_chunk_size(monkeypatch: pytest.MonkeyPatch,
                                                       policy: str) -> None:
    sc = _scenario()
    big = simulate(sc, make_policy(policy),
                   forecast_mode=default_forecast_mode(sc), noise=0.1, seed=2)
    monkeypatch.setattr(chunks, "CHUNK_ROWS", 3)
    mem = MemoryRecorder()
    small = simulate(sc, make_policy(policy),
                     forecast_mode=default_forecast_mode(sc), noise=0.1, seed=2, recorders=[mem])
    pd.testing.assert_frame_equal(big.plan, small.plan)
    pd.testing.assert_frame_equal(big.migrations, small.migrations)
    timing = ["decide_s", "solve_s"]
    pd.testing.assert_frame_equal(big.slots.drop(columns=timing),
                                  small.slots.drop(columns=timing))
    pd.testing.assert_frame_equal(big.queues, small.queues)
    # The recorders' rows are the plan's rows.
    rows = mem.plan()
    assert list(rows.columns) == list(big.plan.columns)
    pd.testing.assert_frame_equal(rows.astype(big.plan.dtypes.to_dict()), big.plan,
                                  check_dtype=False)
    assert sum(r.n_rows for r in mem.records) == len(big.plan)
    frame = mem.records[3].plan_frame()
    assert list(frame.columns) == list(big.plan.columns)
    assert len(frame) == mem.records[3].n_rows


def test_plan_columns_and_metrics_as_the_row_form_gave() -> None:
    sc = _scenario()
    res = simulate(sc, make_policy("lookahead"),
                   forecast_mode=default_forecast_mode(sc), noise=0.1, seed=2)
    base = simulate(sc, make_policy("asap-home"), forecast_mode=default_forecast_mode(sc))
    attribute_savings(res, base, sc)
    # The metrics and the attribution read the queue trace's totals: neither run has built
    # its wide table of slots x queues (the end-of-run peak of a long trace).
    assert isinstance(res._queues, QueueTrace) and isinstance(base._queues, QueueTrace)
    plan = res.plan
    assert tuple(plan.columns[2:]) == PLAN_STORED_COLUMNS
    assert tuple(plan.columns[-len(PLAN_EXTRA_COLUMNS):]) == PLAN_EXTRA_COLUMNS
    assert str(plan["slot_start"].dt.tz) == "UTC"
    step = pd.Timedelta(seconds=sc.slot_s)
    assert (plan["slot_end"] - plan["slot_start"] == step).all()
    assert (plan["slot_start"] == pd.Timestamp(sc.start) + plan["slot"] * step).all()
    assert plan["n_gpus"].dtype == np.int64 and plan["energy_kwh"].dtype == np.float64
    # The metrics from the queue trace's totals equal those from the wide table (the form
    # a run read back from CSV or the store takes).
    wide = compute_metrics({"plan": plan, "migrations": res.migrations, "slots": res.slots,
                            "jobs": res.jobs, "queues": res.queues, "meta": res.meta}, sc)
    assert set(wide) == set(res.metrics)
    for key, value in res.metrics.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(wide[key]), key
        elif isinstance(value, float):
            assert wide[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
        else:
            assert wide[key] == value, key
    assert any(k.startswith("queue_mean:mu") for k in res.metrics)


def test_an_empty_run_keeps_the_columns() -> None:
    sc = tiny_scenario([training("late", arrival_slot=20)], n_slots=4)
    res = simulate(sc, make_policy("asap-home"), forecast_mode=default_forecast_mode(sc))
    assert res.plan.empty and list(res.plan.columns[:2]) == ["slot_start", "slot_end"]
    assert str(res.plan["slot_start"].dtype).startswith("datetime64")
    assert res.migrations.empty and len(res.slots) == 4
    assert res.queues.shape == (4, 0) and res.queue_totals.shape == (4, 0)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 50), chunk=st.integers(1, 40))
def test_plan_sums_are_the_slot_totals(seed: int, chunk: int) -> None:
    """Property: whatever the chunk size, the plan's rows add up to each slot's totals."""
    chunks.CHUNK_ROWS, old = chunk, chunks.CHUNK_ROWS
    try:
        sc = _scenario()
        res = simulate(sc, make_policy("asap-home"), forecast_mode=default_forecast_mode(sc),
                       noise=0.2, seed=seed)
    finally:
        chunks.CHUNK_ROWS = old
    by_slot = res.plan.groupby("slot")[["energy_kwh", "cost", "carbon_kg"]].sum()
    slots = res.slots.set_index("slot").loc[by_slot.index]
    for col in ("energy_kwh", "cost", "carbon_kg"):
        np.testing.assert_allclose(by_slot[col].to_numpy(), slots[col].to_numpy(),
                                   rtol=1e-9, atol=1e-12)
