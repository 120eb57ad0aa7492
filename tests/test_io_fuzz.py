"""Malformed input thrown at every reader: the only exception allowed is InputError."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import perf
from workbench.io import bounds
from workbench.io.errors import InputError
from workbench.io.grid import read_grid
from workbench.io.jobs import JOB_FORMATS, jobs_from_trace
from workbench.io.latency import read_latency_matrix

TIMES = st.sampled_from([
    "2023-01-01 00:00:00", "2023-01-01 01:00:00", "2023-01-01 01:00:00+00:00",
    "2023-03-26 02:30:00", "2023-10-29 02:00:00", "02/18/2016 00:15:00", "2023-13-40 99:00",
    "", "NaN", "x", "2023-01-01T00:00:00Z", "9999-12-31 23:59:59", "0001-01-01 00:00:00",
    "1e9", "2023-01-01 00:00:00+25:00",
])
NAMES = st.sampled_from(["a", "b", "cifar10", "ncf", "bert", "imagenet", "yolov3", "1", "2"])
CELLS = st.one_of(
    TIMES, NAMES,
    st.sampled_from(["1", "-3.5", "0", "1e400", "nan", "", " ", "1,5", "abc", "-0", "8760",
                     "3.3e-12", "inf", "99999999999999999999", "1e20", "1e300", "2.5", "V100M16",
                     "LS"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
)

HEADERS = {
    "electricitymaps-csv": ["Datetime (UTC)", "Carbon Intensity gCO₂eq/kWh (direct)",
                            "Carbon Intensity gCO₂eq/kWh (LCA)"],
    "price-csv": ["Datetime (UTC)", "Datetime (Local)", "Price (USD/MWh)"],
    "price-local": ["Datetime", "Price (JPY/MWh)"],
    "watttime-csv": ["oootime", "Caiso_North"],
    "avert": ["Month", "Timestamp", "CA"],
    "nyiso-lmp": ["Time Stamp", "Name", "PTID", "LBMP ($/MWHr)"],
    "csv": ["t", "v"],
    "pollux-workload": ["name", "time", "application", "num_replicas", "batch_size"],
    "philly": ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"],
    "alibaba-pods": ["name", "num_gpu", "gpu_milli", "creation_time", "deletion_time",
                     "scheduled_time"],
    "gaia": ["arrival_time", "length", "cpus"],
    "latency": ["origin", "A", "B"],
}

PROFILES = perf.load_default_profiles()


def _jobs(fmt: str, path: Path) -> list[Any]:
    """Read a trace and map it to jobs (the mapping sees the odd values too)."""
    return jobs_from_trace(JOB_FORMATS[fmt](path), PROFILES)


READERS: dict[str, Callable[[Path], Any]] = {
    "electricitymaps-csv": lambda p: read_grid("electricitymaps-csv", p, "R"),
    "price-csv": lambda p: read_grid("price-csv", p, "R"),
    "price-local": lambda p: read_grid("price-csv", p, "R", timezone="Europe/Berlin"),
    "watttime-csv": lambda p: read_grid("watttime-csv", p, "R"),
    "avert": lambda p: read_grid("avert", p, "CA", year=2023),
    "nyiso-lmp": lambda p: read_grid("nyiso-lmp", p, "R", column="1"),
    "csv": lambda p: read_grid("csv", p, "R", time_column="t", value_column="v",
                               kind="price", unit="EUR/MWh", timezone="America/New_York"),
    "pollux-workload": lambda p: _jobs("pollux-workload", p),
    "philly": lambda p: _jobs("philly", p),
    "alibaba-pods": lambda p: _jobs("alibaba-pods", p),
    "gaia": lambda p: _jobs("gaia", p),
    "latency": lambda p: _bounded_latency(read_latency_matrix(p)),
}


def _bounded_latency(matrix: pd.DataFrame) -> pd.DataFrame:
    """An accepted latency matrix holds plausible round-trip times only."""
    assert not bounds.LATENCY.outside(matrix.to_numpy(dtype=float)).any(), matrix
    return matrix


@st.composite
def csv_text(draw: st.DrawFn, header: list[str]) -> str:
    """A CSV with the format's header (sometimes mangled) and random rows."""
    sep = draw(st.sampled_from([",", ",", ",", ";", "\t"]))
    head = list(header)
    if draw(st.booleans()) and head:
        head.pop(draw(st.integers(0, len(head) - 1)))
    n_rows = draw(st.integers(0, 6))
    width = st.integers(max(len(head) - 1, 0), len(head) + 1)
    rows = [[draw(CELLS) for _ in range(draw(width))] for _ in range(n_rows)]
    lines = [sep.join(head)] + [sep.join(r) for r in rows]
    if draw(st.booleans()):
        lines.insert(0, "")
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n", '"']))


def _check(reader: Callable[[Path], Any], data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.csv"
        path.write_bytes(data)
        try:
            out = reader(path)
        except InputError as exc:
            assert str(path) in str(exc)
        else:
            _assert_finite(out)


def _assert_finite(out: Any) -> None:
    """What a reader accepts is finite: an overflow or a NaN never reaches the store."""
    if isinstance(out, pd.DataFrame):
        numbers = out.select_dtypes("number").to_numpy(dtype=float)
        assert np.isfinite(numbers).all(), out


SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(name=st.sampled_from(sorted(READERS)), data=st.data())
def test_structured_garbage_only_raises_input_error(name: str, data: st.DataObject) -> None:
    text = data.draw(csv_text(HEADERS[name]))
    _check(READERS[name], text.encode("utf-8"))


@SETTINGS
@given(name=st.sampled_from(sorted(READERS)), blob=st.binary(max_size=200))
def test_random_bytes_only_raise_input_error(name: str, blob: bytes) -> None:
    _check(READERS[name], blob)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True),
              TIMES, st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(
                                ["history", "datetime", "carbonIntensity", "items", "rate",
                                 "energyratestructure", "energyweekdayschedule",
                                 "energyweekendschedule", "adj", "unit"]), inner, max_size=4)),
    max_leaves=20,
)


@SETTINGS
@given(doc=JSON_VALUES, fmt=st.sampled_from(["electricitymaps-json", "urdb-json"]))
def test_json_readers_only_raise_input_error(doc: Any, fmt: str) -> None:
    opts = {"start": "2023-01-01", "end": "2023-01-02", "timezone": "UTC"} if fmt == "urdb-json" \
        else {}
    _check(lambda p: read_grid(fmt, p, "R", **opts), json.dumps(doc).encode())


@SETTINGS
@given(rows=st.lists(st.tuples(TIMES, st.sampled_from(["1", "2.5", "-4", ""])), min_size=1,
                     max_size=5))
def test_history_json_with_odd_readings(rows: list[tuple[str, str]]) -> None:
    doc = {"history": [{"datetime": t, "carbonIntensity": float(v) if v else None}
                       for t, v in rows]}
    _check(lambda p: read_grid("electricitymaps-json", p, "R"), json.dumps(doc).encode())


def test_valid_rows_survive_the_reader(tmp_path: Path) -> None:
    """A sanity anchor for the fuzzing: a clean file reads fully."""
    path = tmp_path / "ok.csv"
    path.write_text("t,v\n2023-01-01 00:00,1\n2023-01-01 01:00,2\n")
    frame = READERS["csv"](path)
    assert isinstance(frame, pd.DataFrame) and len(frame) == 2
