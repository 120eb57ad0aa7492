"""The store's grid upsert (``Store.write_grid_series``): a plain insert when a file meets
no stored rows, an update of the rows it meets plus an insert of the rest otherwise; both
against a dictionary model of the documented merge (a value a file does not carry keeps the
stored one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.io import grid
from workbench.store import Store, StoreError
from workbench.store import grid as store_grid
from workbench.store.grid import is_constant

_VALUES = ("price_per_kwh", "currency", "carbon_g_per_kwh", "source")
_T0 = pd.Timestamp("2025-01-01")


def _model_write(model: dict[tuple[str, pd.Timestamp], dict[str, object]],
                 frame: pd.DataFrame) -> None:
    for rec in frame.to_dict("records"):
        key = (str(rec["region"]), pd.Timestamp(rec["time_utc"]).tz_localize(None))
        old = model.get(key, dict.fromkeys(_VALUES))
        model[key] = {c: rec[c] if c in rec and not pd.isna(rec[c]) else old[c]
                      for c in _VALUES}


def _stored(store: Store) -> dict[tuple[str, pd.Timestamp], dict[str, object]]:
    out = {}
    for rec in store.table("grid_series").to_dict("records"):
        out[(rec["region"], pd.Timestamp(rec["time_utc"]))] = {
            c: None if pd.isna(rec[c]) else rec[c] for c in _VALUES}
    return out


def _clean(model: dict[tuple[str, pd.Timestamp], dict[str, object]]
           ) -> dict[tuple[str, pd.Timestamp], dict[str, object]]:
    return {k: {c: None if v is None or pd.isna(v) else v for c, v in rec.items()}
            for k, rec in model.items()}


_write = st.fixed_dictionaries({
    "hours": st.lists(st.integers(0, 11), min_size=1, max_size=8, unique=True),
    "regions": st.sampled_from([("a",), ("b",), ("a", "b")]),
    "kind": st.sampled_from(["price", "carbon", "both"]),
    "base": st.integers(0, 50),
    "aware": st.booleans(),
    "categorical": st.booleans(),
})


def _frame(w: dict[str, object], i: int) -> pd.DataFrame:
    hours = sorted(w["hours"])  # type: ignore[call-overload]
    regions = w["regions"]
    rows = [(r, h) for r in regions for h in hours]  # type: ignore[attr-defined]
    t = pd.DatetimeIndex([_T0 + pd.Timedelta(hours=h) for _, h in rows])
    data: dict[str, object] = {"time_utc": t.tz_localize("UTC") if w["aware"] else t,
                               "region": [r for r, _ in rows]}
    base = float(w["base"])  # type: ignore[arg-type]
    if w["kind"] in ("price", "both"):
        data["price_per_kwh"] = base / 100 + np.arange(len(rows)) / 1000
        data["currency"] = "EUR"
    if w["kind"] in ("carbon", "both"):
        data["carbon_g_per_kwh"] = base + np.arange(len(rows), dtype=float)
    data["source"] = f"write {i}"
    frame = pd.DataFrame(data)
    if w["categorical"]:
        for col in ("region", "currency", "source"):
            if col in frame:
                frame[col] = frame[col].astype("category")
    return frame


@pytest.fixture(scope="module")
def memory_store() -> Iterator[Store]:
    with Store(":memory:") as store:
        yield store


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(writes=st.lists(_write, min_size=1, max_size=3))
def test_upsert_matches_the_merge_model(memory_store: Store,
                                        writes: list[dict[str, object]]) -> None:
    store = memory_store
    store.con.execute("DELETE FROM grid_series")
    model: dict[tuple[str, pd.Timestamp], dict[str, object]] = {}
    for i, w in enumerate(writes):
        frame = _frame(w, i)
        assert store.write_grid_series(frame) == len(frame)
        _model_write(model, frame)
    assert _stored(store) == _clean(model)


def test_a_file_over_stored_rows_updates_them_and_inserts_the_rest() -> None:
    with Store(":memory:") as store:
        carbon = pd.DataFrame({"time_utc": pd.date_range(_T0, periods=5, freq="h"),
                               "region": "r", "carbon_g_per_kwh": np.arange(5.0),
                               "source": "carbon file"})
        store.write_grid_series(carbon)
        price = pd.DataFrame({"time_utc": pd.date_range(_T0 + pd.Timedelta(hours=3), periods=4,
                                                        freq="h"),
                              "region": "r", "price_per_kwh": [0.1, 0.2, 0.3, 0.4],
                              "currency": "USD", "source": "price file"})
        store.write_grid_series(price)
        rows = store.table("grid_series").sort_values("time_utc").reset_index(drop=True)
    assert len(rows) == 7
    assert rows["carbon_g_per_kwh"].tolist()[:5] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert rows["carbon_g_per_kwh"].isna().tolist()[5:] == [True, True]
    assert rows["price_per_kwh"].isna().tolist()[:3] == [True, True, True]
    assert rows["price_per_kwh"].tolist()[3:] == [0.1, 0.2, 0.3, 0.4]
    assert rows["source"].tolist() == ["carbon file"] * 3 + ["price file"] * 4


def test_a_refused_upsert_leaves_the_rows_met_as_they_were(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    with Store(db) as store:
        store.write_grid_series(pd.DataFrame({
            "time_utc": pd.date_range(_T0, periods=3, freq="h"), "region": "r",
            "carbon_g_per_kwh": [1.0, 2.0, 3.0], "source": "first"}))
        before = store.table("grid_series")
        # Unsorted, with a repeated time: refused before anything is written.
        times = pd.DatetimeIndex([_T0 + pd.Timedelta(hours=h) for h in (2, 1, 2)])
        bad = pd.DataFrame({"time_utc": times, "region": "r",
                            "carbon_g_per_kwh": [9.0, 9.0, 9.0], "source": "second"})
        with pytest.raises(StoreError, match="duplicate grid row for region r"):
            store.write_grid_series(bad)
        pd.testing.assert_frame_equal(store.table("grid_series"), before)


def test_reader_frames_are_one_category_columns(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("Datetime (UTC),Price (EUR/MWh)\n2025-01-01 00:00+00:00,50\n"
                    "2025-01-01 01:00+00:00,-3\n")
    frame = grid.read_grid("price-csv", path, "R")
    for col in ("region", "currency", "source"):
        assert isinstance(frame[col].dtype, pd.CategoricalDtype)
        assert is_constant(frame[col])
    assert frame["region"].iloc[0] == "R" and frame["currency"].iloc[0] == "EUR"
    with Store(":memory:") as store:
        grid.write_grid(store, frame, path)
        rows = store.table("grid_series")
    assert rows["region"].tolist() == ["R", "R"] and rows["currency"].tolist() == ["EUR"] * 2
    assert rows["price_per_kwh"].tolist() == [0.05, -0.003]


def test_constant_columns() -> None:
    assert is_constant(pd.Series(["a", "a"])) and not is_constant(pd.Series(["a", "b"]))
    assert is_constant(pd.Series(pd.Categorical(["a", "a"])))
    assert not is_constant(pd.Series(pd.Categorical(["a", None])))
    assert is_constant(pd.Series(pd.Categorical([None, None], categories=["a"])))
    assert is_constant(pd.Series([], dtype="category"))


def test_a_large_grid_write_runs_on_one_thread_and_restores_the_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_grid, "GRID_ONE_THREAD_ROWS", 2)
    seen: list[str] = []
    real = store_grid.merge_grid

    def spy(con, *a):  # type: ignore[no-untyped-def]
        seen.append(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        return real(con, *a)

    monkeypatch.setattr(store_grid, "merge_grid", spy)
    with Store(":memory:") as store:
        store.con.execute("SET threads = 2")
        frame = pd.DataFrame({"time_utc": pd.date_range(_T0, periods=3, freq="h"),
                              "region": "r", "carbon_g_per_kwh": [1.0, 2.0, 3.0]})
        store.write_grid_series(frame)
        bad = frame.assign(region="s", time_utc=[_T0, pd.NaT, _T0 + pd.Timedelta(hours=1)])
        with pytest.raises(duckdb.ConstraintException):  # a time is missing: NOT NULL
            store.write_grid_series(bad)
        assert store.con.execute("SELECT current_setting('threads')").fetchall()[0][0] == 2
        assert len(store.table("grid_series")) == 3
    assert seen == [1, 1]
