"""Plausibility bounds: every bad value the issue found gets a one-line error, exit 2, and the
store is left as it was; plausible values (negative prices included) still import."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.cli import main
from workbench.io import bounds
from workbench.io.errors import InputError
from workbench.io.grid import read_grid
from workbench.store import Store

PRICE_HEAD = "Datetime (UTC),Datetime (Local),Price (USD/MWh)\n"
GOOD_PRICES = (PRICE_HEAD + "2023-01-01 00:00:00+00:00,2023-01-01 01:00:00+01:00,-3.5\n"
               "2023-01-01 01:00:00+00:00,2023-01-01 02:00:00+01:00,12.0\n")


def _db_with_prices(tmp_path: Path) -> str:
    db = str(tmp_path / "wb.duckdb")
    good = tmp_path / "good.csv"
    good.write_text(GOOD_PRICES)
    assert main(["--db", db, "import", "grid", "price-csv", str(good), "--region", "R"]) == 0
    return db


def _snapshot(db: str) -> dict[str, object]:
    with Store(db) as store:
        return {t: store.table(t).to_csv() for t in ("grid_series", "jobs", "profiles")}


URDB = {"name": "t", "energyratestructure": [[{"rate": 0.1, "unit": "kWh"},
                                              {"rate": 0.2, "unit": "kWh"}]],
        "energyweekdayschedule": [[0] * 24] * 12, "energyweekendschedule": [[0] * 24] * 12}

CASES = [
    ("price 1e305 USD/MWh", "price-csv",
     PRICE_HEAD + "2023-01-01 00:00:00+00:00,2023-01-01 01:00:00+01:00,1e305\n", [],
     r"line 2, column 'Price \(USD/MWh\)': 1e\+305 = 1e\+302 USD/kWh is outside the plausible "
     r"electricity price range \[-100, 100\] USD/kWh"),
    ("header unit tCO2/Wh overflows", "csv",
     "t,v\n2023-01-01 00:00,1e300\n",
     ["--time-column", "t", "--value-column", "v", "--kind", "carbon", "--unit", "tCO2/Wh"],
     r"line 2, column 'v': 1e\+300 = inf gCO2/kWh overflows"),
    ("csv carbon -2.5", "csv", "t,v\n2023-01-01 00:00,-2.5\n",
     ["--time-column", "t", "--value-column", "v", "--kind", "carbon", "--unit", "gCO2/kWh"],
     r"line 2, column 'v': -2.5 gCO2/kWh is outside the plausible average carbon intensity"),
    ("electricitymaps-json 1e308 g/kWh", "electricitymaps-json",
     json.dumps({"history": [{"datetime": "2024-01-01T00:00:00Z", "carbonIntensity": 1e308}]}),
     [], r"2024-01-01 00:00:00 UTC: 1e\+308 gCO2/kWh is outside the plausible average carbon"),
    ("AVERT 1e307 lb/kWh", "avert", "Month,Timestamp,R\n1,0,0.5\n1,1,1e307\n",
     ["--year", "2023"], r"line 3, column 'R': 1e\+307 lb/kWh = inf gCO2/kWh overflows"),
    ("AVERT 9 lb/kWh", "avert", "Month,Timestamp,R\n1,0,9\n", ["--year", "2023"],
     r"9 lb/kWh = 4082.33 gCO2/kWh is outside the plausible marginal carbon"),
    ("urdb --tier 99", "urdb-json", json.dumps(URDB),
     ["--start", "2023-07-01", "--end", "2023-07-02", "--timezone", "UTC", "--tier", "99"],
     r"--tier 99 does not exist: the tariff's periods have at most 2 tier\(s\); pass --tier 0..1"),
]


@pytest.mark.parametrize("name,fmt,text,flags,message", CASES, ids=[c[0] for c in CASES])
def test_implausible_grid_values_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, fmt: str, text: str,
    flags: list[str], message: str,
) -> None:
    db = _db_with_prices(tmp_path)
    before = _snapshot(db)
    path = tmp_path / ("bad.json" if fmt.endswith("json") else "bad.csv")
    path.write_text(text)
    capsys.readouterr()
    assert main(["--db", db, "import", "grid", fmt, str(path), "--region", "R", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert __import__("re").search(message, err), err
    assert _snapshot(db) == before


def test_negative_prices_and_marginal_rates_stay_accepted(tmp_path: Path) -> None:
    frame = read_grid("avert", _write(tmp_path, "Month,Timestamp,R\n1,0,-0.3\n"), "R",
                      year=2023)
    assert frame["carbon_g_per_kwh"].iloc[0] == pytest.approx(-0.3 * 453.59237)
    frame = read_grid("price-csv", _write(tmp_path, GOOD_PRICES), "R")
    assert frame["price_per_kwh"].min() == pytest.approx(-0.0035)


def _write(tmp_path: Path, text: str, name: str = "f.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@settings(max_examples=40, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["USD", "JPY", "XYZ"]))
def test_price_bound_property(value: float, currency: str) -> None:
    """Inside +-100 x scale: accepted and stored exactly; outside, NaN or inf: refused."""
    bound = bounds.price_bound(currency)
    inside = bool(np.isfinite(value) and abs(value) <= bound.high)
    assert bound.outside(np.array([value]))[0] == (not inside)
    if inside:
        bounds.check(np.array([value]), bound, "p.csv")
    else:
        with pytest.raises(InputError, match="p.csv"):
            bounds.check(np.array([value]), bound, "p.csv")


ZEUS_HEAD = "dataset,network,batch_size,power_limit,time_per_epoch,average_power\n"
ZEUS_ROWS = [f"cifar100,shufflenetv2,{b},250,{100 / b},{100 + b}"
             for b in (32, 64, 128, 256)]


@pytest.mark.parametrize("column,value,message", [
    ("average_power", "-5", r"line 3, column 'average_power': '-5' W is outside the plausible "
     r"average power range \(0, 500\] W"),
    ("average_power", "900", r"'900' W is outside"),
    ("time_per_epoch", "0", r"column 'time_per_epoch': '0.0' is outside"),
])
def test_zeus_power_out_of_bounds_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: str, message: str,
) -> None:
    rows = [r.split(",") for r in ZEUS_ROWS]
    rows[1][ZEUS_HEAD.strip().split(",").index(column)] = value
    (tmp_path / "summary_power_v100.csv").write_text(
        ZEUS_HEAD + "\n".join(",".join(r) for r in rows) + "\n")
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "import", "profiles", "zeus", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and __import__("re").search(message, err), err
    with Store(db) as store:
        assert store.load_profiles() == []


PLACEMENTS = "placement,local_bsz,step_time,sync_time\n" + "".join(
    f"{p},{b},{0.1 * b / 32 + 0.01 * len(p)},{0.01 * (len(p) - 1)}\n"
    for p in ("1", "2", "4", "11", "22") for b in (32, 64))
SCALABILITY = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,1,32,0.1,0\n"


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("\n1,32,", "\n1,32,-", 1), r"line 2, column 'step_time': '-0.1.*' "
     r"is outside the plausible step time range \(0, 86400\] s"),
    (lambda t: t.split("\n")[0] + "\n", "has a header but no rows"),
    (lambda t: t.replace("1,64,", "x,64,", 1), "'x' is not a placement"),
])
def test_pollux_bad_timings_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: object, message: str,
) -> None:
    app = tmp_path / "cifar10"
    app.mkdir()
    text = edit(PLACEMENTS)  # type: ignore[operator]
    (app / "placements.csv").write_text(text)
    (app / "scalability.csv").write_text(SCALABILITY)
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "import", "profiles", "pollux", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and __import__("re").search(message, err), err
    assert "Traceback" not in err


def test_fit_with_every_sync_above_step_is_one_line(tmp_path: Path) -> None:
    import pandas as pd

    from workbench.fit import ProfileDataError, fit_throughput_params

    rows = pd.DataFrame({"num_nodes": [1, 1, 1], "num_replicas": [1, 2, 4],
                         "local_bsz": [32, 32, 32], "step_time": [0.1, 0.1, 0.1],
                         "sync_time": [0.2, 0.2, 0.2]})
    with pytest.raises(ProfileDataError, match="every one of the 3 timing rows has sync_time"):
        fit_throughput_params(rows)


@pytest.mark.parametrize("cell, message", [
    ("1e300", r"1e\+300 ms is outside the plausible round-trip latency range \[0, 100000\] ms"),
    ("-5", r"negative latency -5"), ("inf", r"'inf' is not a finite number"),
])
def test_latency_matrix_values_are_bounded(tmp_path: Path, cell: str, message: str) -> None:
    """A latency matrix cell becomes a link's latency: it is bounded like latency_ms in a
    config (it was the one imported number without a bound)."""
    from workbench.io.errors import InputError
    from workbench.io.latency import read_latency_matrix

    path = _write(tmp_path, f"origin,A,B\nA,1,{cell}\nB,20,1\n", "lat.csv")
    with pytest.raises(InputError, match=r"lat\.csv, line 2, column 'B': " + message):
        read_latency_matrix(path)
    assert read_latency_matrix(_write(tmp_path, "origin,A,B\nA,1,99999\nB,20,0\n",
                                      "ok.csv")).at["A", "B"] == 99999.0
