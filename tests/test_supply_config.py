"""``[[supply]]`` and ``[[demand_charges]]`` in a scenario TOML: bad entries are one-line
errors naming the key; good ones build (pvlib's clear sky, imported series, a URDB demand
structure), are stored with the scenario and planned; ``plan --json`` carries the bill."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from workbench.build import BuildError, build_and_save, build_scenario
from workbench.cli import main
from workbench.config import ConfigError, validate_config
from workbench.io.grid import import_grid
from workbench.io.jobs import import_jobs
from workbench.store import Store

START = pd.Timestamp("2024-03-04T00:00:00Z")
TARIFFS = Path(__file__).resolve().parents[2] / "shared" / "data" / "tariffs"

BASE: dict[str, Any] = {
    "scenario": {"name": "g", "start": "2024-03-04T00:00:00Z", "hours": 24,
                 "slot_minutes": 60, "currency": "USD"},
    "datacenters": [{"name": "a", "region": "ZA", "timezone": "America/Los_Angeles",
                     "pue": 1.2},
                    {"name": "b", "region": "ZB", "pue": 1.3}],
    "pools": [{"datacenter": "a", "gpu_type": "A100", "count": 8, "idle_power_w": 60.0,
               "max_power_w": 400.0},
              {"datacenter": "b", "gpu_type": "A100", "count": 8, "idle_power_w": 60.0,
               "max_power_w": 400.0}],
    "links": [{"src": "a", "dst": "b", "latency_ms": 10.0, "bandwidth_gbps": 10.0}],
    "jobs": {"set": "wl", "homes": ["a", "b"], "min_deadline_h": 12.0},
}

SOLAR = {"datacenter": "a", "kind": "solar", "capacity_kw": 5.0, "latitude": 37.4,
         "longitude": -121.9, "tilt_deg": 25.0, "azimuth_deg": 180.0}
BATTERY = {"datacenter": "a", "kind": "battery", "energy_kwh": 8.0, "power_kw": 2.0}


def _config(*supply: dict[str, Any], demand: tuple[dict[str, Any], ...] = ()
            ) -> dict[str, Any]:
    cfg = copy.deepcopy(BASE)
    cfg["supply"] = [dict(s) for s in supply]
    cfg["demand_charges"] = [dict(d) for d in demand]
    return cfg


BAD = [
    ("solar without capacity", {**SOLAR, "capacity_kw": None},
     r"\[\[supply\]\] entry 0 \(solar\) lacks capacity_kw; give the nameplate kW"),
    ("solar without a site", {k: v for k, v in SOLAR.items() if k != "latitude"},
     r"entry 0 \(solar\) lacks latitude; give the site for the clear-sky model"),
    ("unknown kind", {**SOLAR, "kind": "nuclear"},
     r"\[\[supply\]\] entry 0 kind: 'nuclear' must be 'solar', 'wind', 'ppa' or 'battery'"),
    ("capacity as text", {**SOLAR, "capacity_kw": "big"},
     r"\[\[supply\]\] entry 0 capacity_kw: 'big' is not a number; give nameplate \(AC\) kW"),
    ("negative capacity", {**SOLAR, "capacity_kw": -5.0},
     r"\[\[supply\]\] entry 0 capacity_kw: -5.0 must be greater than 0"),
    ("tilt nan", {**SOLAR, "tilt_deg": float("nan")},
     r"\[\[supply\]\] entry 0 tilt_deg: nan is not a finite number"),
    ("latitude out of range", {**SOLAR, "latitude": 95.0},
     r"latitude: 95.0 must be less than or equal to 90"),
    ("unknown datacenter", {**SOLAR, "datacenter": "z"},
     r"\[\[supply\]\] entry 0 datacenter: 'z' is not a \[\[datacenters\]\] name; known: "
     r"a, b; name one of them"),
    ("battery key on solar", {**SOLAR, "energy_kwh": 4.0},
     r"a solar entry takes no energy_kwh; its keys: "),
    ("unknown key", {**SOLAR, "panels": 12},
     r"\[\[supply\]\] entry 0: unknown keys \['panels'\]; known: "),
    ("battery without power", {k: v for k, v in BATTERY.items() if k != "power_kw"},
     r"entry 0 \(battery\) lacks power_kw; give the battery's size"),
    ("soc bounds", {**BATTERY, "soc_min": 0.6, "soc_max": 0.5},
     r"entry 0 \(battery\): soc_min \(0.6\) must be below soc_max \(0.5\)"),
    ("soc start", {**BATTERY, "soc_initial": 0.05},
     r"soc_initial \(0.05\) must lie between soc_min \(0.1\) and soc_max \(1\)"),
    ("efficiency", {**BATTERY, "round_trip_efficiency": 1.2},
     r"round_trip_efficiency: 1.2 must be less than or equal to 1"),
    ("ppa two shapes", {"datacenter": "b", "kind": "ppa", "volume_kw": 3.0,
                        "shape_kw": [1.0] * 24},
     r"\(ppa\) needs exactly one of volume_kw, shape_kw, series"),
    ("ppa short shape", {"datacenter": "b", "kind": "ppa", "shape_kw": [1.0] * 5},
     r"shape_kw: .* should have at least 24 items|shape_kw: list must"),
    ("wind without series", {"datacenter": "b", "kind": "wind", "capacity_kw": 3.0},
     r"\(wind\) lacks series; give an imported wind speed"),
]


@pytest.mark.parametrize("name,entry,message", BAD, ids=[b[0] for b in BAD])
def test_bad_supply_entries_are_one_line_errors(name: str, entry: dict[str, Any],
                                                message: str) -> None:
    cfg = _config({k: v for k, v in entry.items() if v is not None})
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    text = str(err.value)
    assert "\n" not in text and re.search(message, text), text


DEMAND_BAD = [
    ({"datacenter": "b"}, r"\[\[demand_charges\]\] entry 0 lacks a charge; give "),
    ({"datacenter": "b", "price_per_kw_month": 5.0, "urdb": "t.json"},
     r"give price_per_kw_month or urdb, not both"),
    ({"datacenter": "b", "capacity_kva": 100.0},
     r"capacity_kva and price_per_kva_month come together"),
    ({"datacenter": "b", "price_per_kw_month": -1.0},
     r"price_per_kw_month: -1.0 must be greater than 0"),
    ({"datacenter": "q", "price_per_kw_month": 1.0}, r"datacenter: 'q' is not a"),
]


@pytest.mark.parametrize("entry,message", DEMAND_BAD)
def test_bad_demand_charges_are_one_line_errors(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_config(_config(demand=(entry,)))
    assert "\n" not in str(err.value) and re.search(message, str(err.value)), str(err.value)


def test_a_bad_entry_in_a_toml_file_is_one_line_and_exit_2(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[scenario]\nstart = "2024-03-04T00:00:00Z"\nhours = 24\n'
                    '[[datacenters]]\nname = "a"\nregion = "ZA"\npue = 1.2\n'
                    '[[supply]]\ndatacenter = "a"\nkind = "battery"\nenergy_kwh = 10.0\n'
                    'power_kw = "fast"\n')
    assert main(["--db", str(tmp_path / "wb.duckdb"), "scenario", "build", "x", "--config",
                 str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: [[supply]] entry 0 power_kw: "
                                                   "'fast' is not a number"), err


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with Store(tmp_path / "wb.duckdb") as s:
        times = pd.date_range(START - pd.Timedelta(hours=2), periods=40, freq="h")
        for region, base in (("ZA", 0.1), ("ZB", 0.2)):
            s.write_grid_series(pd.DataFrame({
                "time_utc": times, "region": region,
                "price_per_kwh": base + 0.05 * np.sin(np.arange(40) / 4), "currency": "USD",
                "carbon_g_per_kwh": 300 + 10 * np.arange(40), "source": "test"}))
        wl = tmp_path / "w.csv"
        wl.write_text("name,time,application,num_replicas,batch_size\n"
                      "j0,0,cifar10,2,256\nj1,600,ncf,1,256\nj2,3600,cifar10,4,256\n")
        import_jobs(s, "pollux-workload", wl, "wl")
        yield s


@pytest.mark.slow
def test_clear_sky_solar_battery_and_a_flat_demand_charge_build_store_and_plan(
        store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(SOLAR, BATTERY, demand=({"datacenter": "b", "price_per_kw_month": 20.0},))
    sc = build_scenario(store, cfg)
    pv = sc.supply.sources[0]
    assert pv.kind == "solar" and pv.modelled and "pvlib clear sky" in pv.origin
    assert pv.available_kw.shape == (24,) and pv.available_kw.max() <= 5.0
    local = pd.date_range(START, periods=24, freq="h").tz_convert("America/Los_Angeles")
    # Daylight in California, nothing at night.
    assert pv.available_kw[np.asarray(local.hour) == 2].max() == 0.0
    assert pv.available_kw[np.asarray(local.hour) == 12].min() > 1.0
    assert sc.supply.battery_at("a").energy_kwh == 8.0
    store.save_scenario(sc)
    back = store.load_scenario("g")
    np.testing.assert_array_equal(back.supply.sources[0].available_kw, pv.available_kw)
    assert back.supply.battery_at("a") == sc.supply.battery_at("a")
    assert back.supply.demand_charges == sc.supply.demand_charges
    store.close()
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "plan", "--scenario", "g", "--json", "--no-progress"]) == 0
    obj = json.loads(capsys.readouterr().out)
    for run in (obj, obj["baseline"]):
        bill = run["bill"]
        assert set(bill) == {"energy", "ppa", "export_credit", "demand", "capacity",
                             "event_payment", "event_penalty", "total", "no_jobs_total"}
        assert bill["total"] == pytest.approx(bill["energy"] + bill["ppa"]
                                              - bill["export_credit"] + bill["demand"]
                                              + bill["capacity"])
        assert run["cost"] == pytest.approx(bill["total"] - bill["no_jobs_total"])
        assert 0.0 < run["green_share"] <= 1.0
        assert run["battery_soc_violations"] == 0
        assert run["curtailed_kwh"] >= 0.0
    # asap-home runs j1 at home in b and pays b's demand charge; the plan need not.
    assert obj["baseline"]["bill"]["demand"] > 0.0
    assert obj["bill"]["total"] <= obj["baseline"]["bill"]["total"]
    assert "prorated" in obj["bill_note"]
    assert main(["--db", db, "plan", "--scenario", "g", "--json", "--no-progress",
                 "--ignore", "supply,demand-charges,power-limits",
                 "--power-limits", "default"]) == 0
    blind = json.loads(capsys.readouterr().out)
    assert blind["bill"]["total"] >= 0.0 and blind["policy"] == "lookahead"
    assert main(["--db", db, "plan", "--scenario", "g", "--ignore", "sun"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown lever(s) to ignore 'sun'" in err
    assert main(["--db", db, "plan", "--scenario", "g", "--power-limits", "0.1"]) == 2
    assert "in [0.4, 1]" in capsys.readouterr().err


@pytest.mark.slow
def test_grid_events_in_the_toml_are_checked_stored_and_held(
        store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ev = {"datacenter": "a", "start": "2024-03-04T06:00:00Z", "hours": 2, "limit_kw": 1.5,
          "notice_hours": 3, "payment_per_kwh": 0.5}
    cfg = _config()
    cfg["grid_events"] = [{**ev, "datacenter": "z"}]
    with pytest.raises(BuildError, match=r"\[\[grid_events\]\] entry 0 datacenter: 'z'"):
        build_scenario(store, cfg)
    cfg["grid_events"] = [{**ev, "start": "2024-03-06T06:00:00Z"}]
    with pytest.raises(BuildError, match="outside the horizon"):
        build_scenario(store, cfg)
    cfg["grid_events"] = [{k: v for k, v in ev.items() if k != "limit_kw"}]
    with pytest.raises(ConfigError, match="give limit_kw .* or cut_pct"):
        validate_config(cfg)
    cfg["grid_events"] = [ev]
    sc = build_scenario(store, cfg)
    event, = sc.supply.grid_events
    assert event.start == START.to_pydatetime() + pd.Timedelta(hours=6)
    store.save_scenario(sc)
    assert store.load_scenario("g").supply.grid_events == (event,)
    store.close()
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "plan", "--scenario", "g", "--json", "--no-progress",
                 "--no-strongest"]) == 0
    obj = json.loads(capsys.readouterr().out)
    row, = obj["grid_events"]
    assert row["datacenter"] == "a" and row["limit_kw"] == 1.5 and row["met"]


def _csv(tmp_path: Path, name: str, values: np.ndarray, column: str) -> Path:
    path = tmp_path / name
    times = pd.date_range(START - pd.Timedelta(hours=3), periods=values.size, freq="h")
    pd.DataFrame({"time": times.strftime("%Y-%m-%dT%H:%M:%SZ"), column: values}).to_csv(
        path, index=False)
    return path


def test_imported_generation_irradiance_and_wind_series_feed_the_sources(
        store: Store, tmp_path: Path) -> None:
    gen = _csv(tmp_path, "gen.csv", np.linspace(0, 3000, 32), "power")
    ghi = _csv(tmp_path, "ghi.csv", np.clip(800 * np.sin(np.arange(32) / 5), 0, None), "ghi")
    wind = _csv(tmp_path, "wind.csv", np.linspace(2, 18, 32), "speed")
    for path, region, kind, unit, col in ((gen, "PV-GEN", "generation", "W", "power"),
                                          (ghi, "PV-GHI", "irradiance", "W/m2", "ghi"),
                                          (wind, "W-SPD", "wind-speed", "m/s", "speed")):
        info = import_grid(store, "csv", path, region, time_column="time", value_column=col,
                           kind=kind, unit=unit)
        assert info.rows == 32
    cfg = _config({"datacenter": "a", "kind": "solar", "capacity_kw": 2.5,
                   "series": "PV-GEN"},
                  {"datacenter": "a", "kind": "solar", "capacity_kw": 4.0, "series": "PV-GHI",
                   "latitude": 37.4, "longitude": -121.9, "name": "pv-ghi"},
                  {"datacenter": "b", "kind": "wind", "capacity_kw": 4200.0,
                   "series": "W-SPD", "hub_height_m": 135.0, "measurement_height_m": 10.0},
                  {"datacenter": "b", "kind": "ppa", "series": "PV-GEN", "price_per_kwh": 0.04,
                   "take_or_pay": False})
    sc = build_scenario(store, cfg)
    gen_kw, ghi_kw, wind_kw, ppa_kw = (s.available_kw for s in sc.supply.sources)
    assert not any(s.modelled for s in sc.supply.sources)
    # 3000 W over the series, read in kW and clipped at the 2.5 kW capacity.
    assert gen_kw.max() == pytest.approx(2.5) and gen_kw[0] == pytest.approx(
        np.linspace(0, 3000, 32)[3] / 1000)
    assert 0 < ghi_kw.max() <= 4.0
    assert wind_kw[-1] > wind_kw[0] and wind_kw.max() <= 4200.0
    np.testing.assert_allclose(ppa_kw, np.clip(np.linspace(0, 3000, 32)[3:27] / 1000, 0, 3.0))
    with pytest.raises(BuildError, match=r"entry 0 series: 'NONE' is not an imported energy "
                                         r"series; known: PV-GEN, PV-GHI, W-SPD; import it"):
        build_scenario(store, _config({"datacenter": "b", "kind": "wind", "capacity_kw": 1.0,
                                       "series": "NONE"}))
    # A series of another kind: irradiance is no wind speed.
    with pytest.raises(BuildError, match=r"the store holds no wind_speed_m_s or generation_kw "
                                         r"series 'PV-GHI'.*import grid csv"):
        build_scenario(store, _config({"datacenter": "b", "kind": "wind", "capacity_kw": 1.0,
                                       "series": "PV-GHI"}))
    import_grid(store, "csv", _csv(tmp_path, "short.csv", np.ones(12), "power"), "PV-SHORT",
                time_column="time", value_column="power", kind="generation", unit="kW")
    with pytest.raises(BuildError, match=r"entry 0: series 'PV-SHORT' does not cover the slot "
                                         r"starting 2024-03-04 10:00.*fill = 'hold'"):
        build_scenario(store, _config({"datacenter": "a", "kind": "solar", "capacity_kw": 2.0,
                                       "series": "PV-SHORT"}))


def test_a_urdb_demand_structure_bills_the_tariffs_tiers(store: Store, tmp_path: Path) -> None:
    urdb = TARIFFS / "multi_tier_urdb_response.json"
    if not urdb.is_file():
        pytest.skip("../shared/data/tariffs is absent")
    sc = build_scenario(store, _config(demand=({"datacenter": "b", "urdb": str(urdb)},)))
    assert sc.name == "g"
    (charge,) = sc.supply.demand_charges
    (struct,) = charge.structures
    assert struct.tiers[1] == ((100.0, 24.368), (np.inf, 17.031))
    assert "URDB" in charge.source
    with pytest.raises(BuildError, match=r"urdb: .*has no demand structure"):
        build_scenario(store, _config(demand=({"datacenter": "b",
                                               "urdb": str(TARIFFS / "virginia.json")},)))
    built = build_and_save(store, _write(tmp_path), "ppa")
    (ppa,) = built.supply.sources
    assert ppa.take_or_pay and ppa.available_kw[8:16].tolist() == [2.0] * 8
    assert built.supply.demand_charges[0].capacity_kva == 50.0
    assert store.load_scenario("ppa").supply.sources[0].take_or_pay


def _write(tmp_path: Path) -> Path:
    text = ('[scenario]\nstart = "2024-03-04T00:00:00Z"\nhours = 24\ncurrency = "USD"\n'
            '[[datacenters]]\nname = "a"\nregion = "ZA"\npue = 1.2\n'
            '[[pools]]\ndatacenter = "a"\ngpu_type = "A100"\ncount = 4\nidle_power_w = 60.0\n'
            'max_power_w = 400.0\n[jobs]\nset = "wl"\nhomes = ["a"]\n'
            '[[supply]]\ndatacenter = "a"\nkind = "ppa"\nshape_kw = [' +
            ", ".join(["0.0"] * 8 + ["2.0"] * 8 + ["0.0"] * 8) + ']\nprice_per_kwh = 0.05\n'
            '[[demand_charges]]\ndatacenter = "a"\ncapacity_kva = 50.0\n'
            'price_per_kva_month = 4.0\n')
    path = tmp_path / "ppa.toml"
    path.write_text(text)
    return path
