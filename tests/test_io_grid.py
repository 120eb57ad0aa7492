"""Grid importers: every format on its real file, round trips through the cube, bad input,
atomic and idempotent imports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.cubes import cube_from_series
from workbench.io.errors import InputError
from workbench.io.grid import import_grid, read_grid
from workbench.store import Store
from workbench.units import LB_TO_G, UnitError, carbon_factor, price_factor

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
G = "grid/"
SC = G + "sustain-cluster/"

# (format, file, options, value column read independently with pandas, factor to the
#  stored unit, expected rows, first UTC time)
REAL = [
    ("electricitymaps-csv", SC + "carbon/DE-LU/DE-LU_2023_hourly.csv", {},
     "Carbon Intensity gCO₂eq/kWh (LCA)", 1.0, 8760, "2023-01-01 00:00"),
    ("electricitymaps-csv", SC + "carbon/US-CAL-CISO/US-CAL-CISO_2023_hourly.csv",
     {"intensity": "direct"}, "Carbon Intensity gCO₂eq/kWh (direct)", 1.0, 8760,
     "2023-01-01 00:00"),
    ("electricitymaps-csv", G + "electricitymaps/ES_2022_hourly.csv", {},
     "Carbon Intensity gCO₂eq/kWh (LCA)", 1.0, 8760, "2022-01-01 00:00"),
    ("electricitymaps-csv", G + "electricitymaps/wide-export/data-sample.csv", {},
     "carbon_intensity_avg", 1.0, 60, "2020-01-01 00:00"),
    ("price-csv", SC + "prices/DE-LU/DE-LU_electricity_prices_2023.csv", {},
     "Price (USD/MWh)", 1e-3, 8760, "2023-01-01 00:00"),
    ("price-csv", SC + "prices/US-TEX-ERCO/US-TEX-ERCO_electricity_prices_2023.csv", {},
     "Price (USD/MWh)", 1e-3, 8760, "2023-01-01 00:00"),
    ("price-csv", SC + "prices-local/JP-TK/JP-TK_electricity_prices_2023.csv",
     {"timezone": "Asia/Tokyo"}, "Price (JPY/MWh)", 1e-3, 8760, "2022-12-31 15:00"),
    ("watttime-csv", G + "watttime/watttime_example.csv", {}, "Caiso_North",
     LB_TO_G / 1000, 8928, "2023-06-08 00:00"),
    ("avert", G + "avert/AVERT_2023_CO2_lb_per_kwh.csv", {"year": 2023, "column": "NY"}, "NY",
     LB_TO_G, 8760, "2023-01-01 00:00"),
]


def _store() -> Store:
    return Store(":memory:")


def _snapshot(store: Store) -> pd.DataFrame:
    """The grid table in a fixed order (for before/after comparisons)."""
    return store.table("grid_series").sort_values(["region", "time_utc"]).reset_index(drop=True)


@pytest.mark.shared_data
@pytest.mark.parametrize(("fmt", "rel", "opts", "col", "factor", "rows", "first"), REAL,
                         ids=[f"{r[0]}:{Path(r[1]).name}" for r in REAL])
def test_real_file_rows_and_ranges(shared_data: Path, fmt: str, rel: str, opts: dict,
                                   col: str, factor: float, rows: int, first: str) -> None:
    path = shared_data / rel
    frame = read_grid(fmt, path, "R", **opts)
    raw = pd.read_csv(path, encoding="utf-8-sig")[col].to_numpy(dtype=float)
    assert len(frame) == rows == len(raw)
    assert frame["time_utc"].iloc[0] == pd.Timestamp(first)
    value = frame["price_per_kwh" if fmt == "price-csv" else "carbon_g_per_kwh"].to_numpy()
    np.testing.assert_allclose(value, raw * factor)
    assert frame["time_utc"].is_monotonic_increasing and frame["time_utc"].is_unique


@pytest.mark.shared_data
def test_real_prices_keep_negative_values(shared_data: Path) -> None:
    path = shared_data / SC / "prices/DE-LU/DE-LU_electricity_prices_2023.csv"
    frame = read_grid("price-csv", path, "DE-LU")
    assert frame["price_per_kwh"].min() == pytest.approx(-0.48439918)
    assert (frame["price_per_kwh"] < 0).sum() > 100
    assert set(frame["currency"]) == {"USD"}


@pytest.mark.shared_data
def test_real_json_history(shared_data: Path) -> None:
    path = shared_data / G / "electricitymaps/api-json/carbon_history_file1.json"
    frame = read_grid("electricitymaps-json", path, "MISO")
    assert len(frame) == 24
    assert frame["time_utc"].iloc[0] == pd.Timestamp("2024-11-30 06:00")
    assert frame["carbon_g_per_kwh"].iloc[0] == 501
    assert 400 < frame["carbon_g_per_kwh"].min() <= frame["carbon_g_per_kwh"].max() < 600


@pytest.mark.shared_data
def test_real_nyiso_zone_in_eastern_time(shared_data: Path) -> None:
    frame = read_grid("nyiso-lmp", shared_data / G / "nyiso/lmp.csv", "nyc", column="N.Y.C.")
    assert len(frame) == 3
    # 02/18/2016 00:15 EST (UTC-5) is 05:15 UTC.
    assert list(frame["time_utc"].dt.strftime("%H:%M")) == ["05:15", "05:30", "05:45"]
    assert frame["price_per_kwh"].between(0.01, 0.1).all()
    with pytest.raises(InputError, match="no zone 'nowhere'.*CAPITL"):
        read_grid("nyiso-lmp", shared_data / G / "nyiso/lmp.csv", "nowhere")


@pytest.mark.shared_data
def test_real_urdb_time_of_use(shared_data: Path) -> None:
    path = shared_data / "tariffs/virginia.json"
    frame = read_grid("urdb-json", path, "va", start="2023-07-03", end="2023-07-10",
                      timezone="America/New_York")
    assert len(frame) == 7 * 24
    by_hour = frame.set_index("time_utc")["price_per_kwh"]
    # Monday 2023-07-03 local (EDT = UTC-4): hour 0 -> period 1, 2 -> period 0, 12 -> period 2.
    assert by_hour[pd.Timestamp("2023-07-03 04:00")] == pytest.approx(0.04944 + 0.03255)
    assert by_hour[pd.Timestamp("2023-07-03 06:00")] == pytest.approx(0.01679 + 0.03255)
    assert by_hour[pd.Timestamp("2023-07-03 16:00")] == pytest.approx(0.14284 + 0.03255)
    multi = read_grid("urdb-json", shared_data / "tariffs/multi_tier_urdb_response.json", "m",
                      start="2023-01-01", end="2023-01-02", timezone="UTC", tier=1)
    assert set(multi["price_per_kwh"].round(6)) == {0.061731}
    for kwargs in ({"start": "2023-01-01", "end": "2023-01-02"},
                   {"end": "2023-01-02", "timezone": "UTC"}):
        with pytest.raises(InputError, match="--"):
            read_grid("urdb-json", path, "va", **kwargs)


@pytest.mark.shared_data
def test_avert_needs_a_matching_year(shared_data: Path) -> None:
    path = shared_data / G / "avert/AVERT_2023_CO2_lb_per_kwh.csv"
    with pytest.raises(InputError, match="--year"):
        read_grid("avert", path, "CA")
    with pytest.raises(InputError, match="line 1418.*'Month'"):
        read_grid("avert", path, "CA", year=2024)
    frame = read_grid("avert", path, "CA", year=2023)
    assert frame["carbon_g_per_kwh"].min() > 0


@pytest.mark.slow
@pytest.mark.shared_data
def test_round_trip_import_cube_values(shared_data: Path) -> None:
    carbon = shared_data / SC / "carbon/DE-LU/DE-LU_2023_hourly.csv"
    price = shared_data / SC / "prices/DE-LU/DE-LU_electricity_prices_2023.csv"
    wt = shared_data / G / "watttime/watttime_example.csv"
    with _store() as store:
        import_grid(store, "electricitymaps-csv", carbon, "DE-LU")
        import_grid(store, "price-csv", price, "DE-LU")
        import_grid(store, "watttime-csv", wt, "CAISO-N")
        import_grid(store, "price-csv", price, "CAISO-N")  # any price: the cube needs both
        cube = cube_from_series(store.grid_series(), 3600, "2023-06-10T00:00Z",
                                "2023-06-11T00:00Z", regions=["DE-LU"])
        raw_c = pd.read_csv(carbon).set_index("Datetime (UTC)")
        raw_p = pd.read_csv(price).set_index("Datetime (UTC)")
        got = cube.sel(region="DE-LU", time="2023-06-10T13:00")
        assert float(got["carbon_g_per_kwh"]) == raw_c.loc["2023-06-10 13:00:00",
                                                           "Carbon Intensity gCO₂eq/kWh (LCA)"]
        assert float(got["price_per_kwh"]) == pytest.approx(
            raw_p.loc["2023-06-10 13:00:00+00:00", "Price (USD/MWh)"] / 1000)
        # 5-minute WattTime rows average into 15-minute slots.
        fine = cube_from_series(store.grid_series(), 900, "2023-06-10T00:00Z",
                                "2023-06-10T01:00Z", regions=["CAISO-N"])
        raw_w = pd.read_csv(wt)["Caiso_North"].to_numpy()
        start = int(np.flatnonzero(pd.read_csv(wt)["oootime"] == "2023-06-10 00:00:00")[0])
        expect = raw_w[start:start + 3].mean() * LB_TO_G / 1000
        assert float(fine["carbon_g_per_kwh"].isel(time=0, region=0)) == pytest.approx(expect)


# -- inline bad input ------------------------------------------------------------------------


def _write(tmp_path: Path, text: str, name: str = "f.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


PRICE_HEAD = "Datetime (UTC),Datetime (Local),Price (USD/MWh)\n"


def _price_row(h: int, value: str = "10.0") -> str:
    return f"2023-01-01 {h:02d}:00:00+00:00,2023-01-01 {h:02d}:00:00+00:00,{value}\n"


BAD = [
    ("empty file", "", "price-csv", {}, r"empty"),
    ("header only", PRICE_HEAD, "price-csv", {}, r"no data rows"),
    ("wrong delimiter", "Datetime (UTC);Price (USD/MWh)\n2023-01-01 00:00:00+00:00;1\n",
     "price-csv", {}, r"line 1.*';'-delimited"),
    ("unknown unit", "Datetime (UTC),Price (USD/furlong)\n2023-01-01 00:00:00,1\n", "price-csv",
     {}, r"column 'Price \(USD/furlong\)'.*unknown energy unit"),
    ("unparseable time", PRICE_HEAD + _price_row(0) + "yesterday,x,3\n", "price-csv", {},
     r"line 3, column 'Datetime \(UTC\)': cannot read time 'yesterday'"),
    ("duplicate time", PRICE_HEAD + _price_row(0) + _price_row(1) + _price_row(1), "price-csv",
     {}, r"line 4.*duplicate timestamp.*also on line 3"),
    ("backwards time", PRICE_HEAD + _price_row(1) + _price_row(0), "price-csv", {},
     r"line 3.*goes backwards.*sort the file"),
    ("NaN value", PRICE_HEAD + _price_row(0) + _price_row(1, "NaN"), "price-csv", {},
     r"line 3, column 'Price \(USD/MWh\)': the value is missing.*--drop-missing"),
    ("not a number", PRICE_HEAD + _price_row(0, "1,5"), "price-csv", {}, r"line 2.*fields"),
    ("text value", PRICE_HEAD + _price_row(0, "abc"), "price-csv", {}, r"'abc' is not a number"),
    ("DST gap", "Datetime,Price (EUR/MWh)\n2023-03-26 01:00:00,1\n2023-03-26 02:00:00,2\n",
     "price-csv", {"timezone": "Europe/Berlin"}, r"line 3.*daylight-saving gap"),
    ("mixed offsets", "t,v\n2023-01-01 00:00:00+01:00,1\n2023-01-01 01:00:00,2\n", "csv",
     {"time_column": "t", "value_column": "v", "kind": "carbon", "unit": "g/kWh"},
     r"line 3.*lacks a UTC offset"),
    ("negative average carbon",
     "Datetime (UTC),Carbon Intensity gCO₂eq/kWh (LCA)\n2023-01-01 00:00:00,-4\n",
     "electricitymaps-csv", {}, r"line 2.*-4 gCO2/kWh is outside the plausible average carbon"),
    ("ragged row", PRICE_HEAD + "2023-01-01 00:00:00+00:00,5\n", "price-csv", {},
     r"line 2: this row has 2 fields"),
    ("unknown carbon unit", "t,v\n2023-01-01 00:00:00,1\n", "csv",
     {"time_column": "t", "value_column": "v", "kind": "carbon", "unit": "kcal/kWh"},
     r"unknown carbon unit"),
    ("missing generic flags", "t,v\n2023-01-01 00:00:00,1\n", "csv", {"time_column": "t"},
     r"--value-column, --kind, --unit"),
    ("option a format lacks", PRICE_HEAD + _price_row(0), "price-csv", {"year": 2023},
     r"does not take --year"),
    ("local times without zone", "Datetime,Price (JPY/MWh)\n2023-01-01 00:00:00,1\n",
     "price-csv", {}, r"--timezone"),
]


@pytest.mark.parametrize(("why", "text", "fmt", "opts", "pattern"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_file_place_and_fix(tmp_path: Path, why: str, text: str, fmt: str,
                                            opts: dict, pattern: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InputError, match=pattern) as info:
        read_grid(fmt, path, "R", **opts)
    assert str(path) in str(info.value)


def test_dst_fold_is_resolved_by_order(tmp_path: Path) -> None:
    rows = ["2023-10-29 01:00:00", "2023-10-29 02:00:00", "2023-10-29 02:00:00",
            "2023-10-29 03:00:00"]
    path = _write(tmp_path, "Datetime,Price (EUR/MWh)\n" + "".join(f"{t},{i}\n"
                                                                  for i, t in enumerate(rows)))
    frame = read_grid("price-csv", path, "DE", timezone="Europe/Berlin")
    hours = list(frame["time_utc"].dt.strftime("%H:%M"))
    assert hours == ["23:00", "00:00", "01:00", "02:00"]


def test_drop_missing_skips_blank_values(tmp_path: Path) -> None:
    path = _write(tmp_path, PRICE_HEAD + _price_row(0) + _price_row(1, "") + _price_row(2, "-7"))
    frame = read_grid("price-csv", path, "R", drop_missing=True)
    assert list(frame["price_per_kwh"]) == [0.01, -0.007]


def test_generic_csv_with_format_zone_and_delimiter(tmp_path: Path) -> None:
    path = _write(tmp_path, "when;eur\n01.07.2023 00:00;50\n01.07.2023 01:00;-20\n")
    frame = read_grid("csv", path, "X", time_column="when", value_column="eur", kind="price",
                      unit="/MWh", currency="EUR", timezone="Europe/Berlin",
                      time_format="%d.%m.%Y %H:%M", delimiter=";")
    assert list(frame["time_utc"]) == [pd.Timestamp("2023-06-30 22:00"),
                                       pd.Timestamp("2023-06-30 23:00")]
    assert list(frame["price_per_kwh"]) == [0.05, -0.02]
    assert set(frame["currency"]) == {"EUR"}


@pytest.mark.parametrize(("unit", "factor"), [
    ("gCO2/kWh", 1.0), ("gCO₂eq/kWh", 1.0), ("kg/MWh", 1.0), ("t/GWh", 1.0),
    ("lb/MWh", LB_TO_G / 1000), ("lb/kWh", LB_TO_G), ("lbs CO2/MWh", LB_TO_G / 1000),
])
def test_carbon_units(unit: str, factor: float) -> None:
    assert carbon_factor(unit) == pytest.approx(factor)


@pytest.mark.parametrize(("unit", "currency", "expect"), [
    ("USD/MWh", None, (1e-3, "USD")), ("$/MWHr", None, (1e-3, "USD")),
    ("€/kWh", None, (1.0, "EUR")), ("/MWh", "cny", (1e-3, "CNY")), ("MWh", "JPY", (1e-3, "JPY")),
])
def test_price_units(unit: str, currency: str | None, expect: tuple[float, str]) -> None:
    assert price_factor(unit, currency) == expect


@pytest.mark.parametrize(("unit", "currency"), [("USD/MWh", "EUR"), ("/MWh", None),
                                                ("USD/bbl", None), ("dollars/MWh", None)])
def test_price_units_rejected(unit: str, currency: str | None) -> None:
    with pytest.raises(UnitError):
        price_factor(unit, currency)


# -- store behaviour -----------------------------------------------------------------------


def test_import_is_idempotent_and_atomic(tmp_path: Path) -> None:
    good = _write(tmp_path, PRICE_HEAD + "".join(_price_row(h, str(h - 3)) for h in range(6)))
    bad = _write(tmp_path, PRICE_HEAD + _price_row(0, "1") + _price_row(1, "oops"), "bad.csv")
    with _store() as store:
        first = import_grid(store, "price-csv", good, "R")
        before = _snapshot(store)
        again = import_grid(store, "price-csv", good, "R")
        assert first.rows == again.rows == 6
        pd.testing.assert_frame_equal(_snapshot(store), before)
        with pytest.raises(InputError, match="bad.csv, line 3"):
            import_grid(store, "price-csv", bad, "R")
        pd.testing.assert_frame_equal(_snapshot(store), before)
        assert store.table("grid_series")["price_per_kwh"].min() == pytest.approx(-0.003)


def test_price_and_carbon_merge_and_currency_is_guarded(tmp_path: Path) -> None:
    price = _write(tmp_path, PRICE_HEAD + _price_row(0) + _price_row(1), "p.csv")
    carbon = _write(tmp_path, "Datetime (UTC),Carbon Intensity gCO₂eq/kWh (LCA)\n"
                    "2023-01-01 00:00:00,100\n2023-01-01 01:00:00,200\n", "c.csv")
    yen = _write(tmp_path, "Datetime (UTC),Price (JPY/MWh)\n2023-01-01 05:00:00,3\n", "y.csv")
    with _store() as store:
        import_grid(store, "price-csv", price, "R")
        import_grid(store, "electricitymaps-csv", carbon, "R")
        table = _snapshot(store)
        assert len(table) == 2 and table["price_per_kwh"].notna().all()
        assert list(table["carbon_g_per_kwh"]) == [100.0, 200.0]
        with pytest.raises(InputError, match="already holds prices in \\['USD'\\]"):
            import_grid(store, "price-csv", yen, "R")
        pd.testing.assert_frame_equal(_snapshot(store), table)
