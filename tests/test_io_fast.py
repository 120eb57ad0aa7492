"""The streaming grid reader gives exactly the exact reader's frame, and defers to it (and
its line-numbered errors) on anything doubtful."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.io import _fast
from workbench.io.errors import InputError
from workbench.io.grid import read_grid


def _both(monkeypatch: pytest.MonkeyPatch, fmt: str, path: Path, **options: object
          ) -> tuple[pd.DataFrame | str, pd.DataFrame | str]:
    out = []
    for threshold in (10**12, 0):  # exact reader, then the streaming one
        monkeypatch.setattr(_fast, "FAST_MIN_BYTES", threshold)
        try:
            out.append(read_grid(fmt, path, "R", **options))
        except InputError as exc:
            out.append(str(exc))
    return out[0], out[1]


def _same(a: pd.DataFrame | str, b: pd.DataFrame | str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
    else:
        pd.testing.assert_frame_equal(a, b)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 30),
    aware=st.booleans(),
    seconds=st.booleans(),
    blank=st.sampled_from([None, 0, 3]),
    bad=st.sampled_from([None, "x", "1,5", "inf", "1e400"]),
    zone=st.sampled_from([None, "Europe/Brussels"]),
    drop=st.booleans(),
    values=st.lists(st.floats(-500, 5000, allow_nan=False), min_size=30, max_size=30),
)
@pytest.mark.slow
def test_fast_and_exact_readers_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      n: int, aware: bool, seconds: bool, blank: int | None,
                                      bad: str | None, zone: str | None, drop: bool,
                                      values: list[float]) -> None:
    times = pd.date_range("2023-03-25 22:00", periods=n, freq="h")  # spans the DST change
    fmt_t = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%dT%H:%M"
    stamps = [t.strftime(fmt_t) + ("+00:00" if aware else "") for t in times]
    cells = [repr(round(v, 3)) for v in values[:n]]
    if blank is not None and blank < n:
        cells[blank] = ""
    if bad is not None:
        cells[-1] = bad
    path = tmp_path / "p.csv"
    if aware:
        head = "Datetime (UTC),Price (EUR/MWh)\n"
        path.write_text(head + "".join(f"{t},{c}\n" for t, c in zip(stamps, cells,
                                                                     strict=True)))
        a, b = _both(monkeypatch, "price-csv", path, drop_missing=drop or None)
    else:
        path.write_text("t,v\n" + "".join(f'{t},"{c}"\n' for t, c in zip(stamps, cells,
                                                                       strict=True)))
        a, b = _both(monkeypatch, "csv", path, time_column="t", value_column="v",
                     kind="price", unit="EUR/MWh", timezone=zone or "UTC",
                     drop_missing=drop or None)
    _same(a, b)


def test_large_file_takes_the_streaming_path(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    times = pd.date_range("2020-01-01", periods=5000, freq="15min")
    path = tmp_path / "big.csv"
    path.write_text("Datetime (UTC),Datetime (Local),Price (USD/MWh)\n" + "".join(
        f"{t:%Y-%m-%d %H:%M:%S}+00:00,{t:%Y-%m-%d %H:%M:%S}+00:00,{i % 97 - 10}\n"
        for i, t in enumerate(times)))
    monkeypatch.setattr(_fast, "FAST_MIN_BYTES", 0)
    calls: list[object] = []
    real = _fast.fast_series

    def spy(*a: object, **k: object) -> object:
        calls.append(real(*a, **k))  # type: ignore[arg-type]
        return calls[-1]

    monkeypatch.setattr(_fast, "fast_series", spy)
    frame = read_grid("price-csv", path, "R")
    assert len(calls) == 1 and calls[0] is not None and len(frame) == 5000
    np.testing.assert_allclose(frame["price_per_kwh"].to_numpy()[:3], [-0.01, -0.009, -0.008])
