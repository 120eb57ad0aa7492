"""Scenarios built from a TOML config and imported data."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from workbench.build import BuildError, build_and_save, build_scenario, load_config
from workbench.cli import main
from workbench.io.grid import import_grid
from workbench.io.jobs import import_jobs
from workbench.store import Store

REPO = Path(__file__).resolve().parents[1]
START = pd.Timestamp("2024-03-04T00:00:00Z")


def _grid(store: Store, region: str, base: float) -> None:
    times = pd.date_range(START - pd.Timedelta(hours=2), periods=60, freq="h")
    store.write_grid_series(pd.DataFrame({
        "time_utc": times, "region": region, "price_per_kwh": base + np.arange(60) / 1000,
        "currency": "USD", "carbon_g_per_kwh": 100 * base + np.arange(60), "source": "test",
    }))


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with Store(tmp_path / "wb.duckdb") as s:
        _grid(s, "ZA", 0.1)
        _grid(s, "ZB", 0.2)
        _grid(s, "ZC", 0.3)
        wl = tmp_path / "w.csv"
        wl.write_text("name,time,application,num_replicas,batch_size\n"
                      "j0,0,cifar10,2,256\nj1,600,ncf,1,256\nj2,7200,bert,4,48\n"
                      "j3,999999,cifar10,1,128\n")
        import_jobs(s, "pollux-workload", wl, "wl")
        yield s


def _matrix(tmp_path: Path) -> Path:
    path = tmp_path / "lat.csv"
    path.write_text("origin,ZA,ZB,ZC,ZB\nZA,5,20,40,21\nZB,22,5,30,5\nZC,40,30,5,30\n")
    return path


def _config(tmp_path: Path) -> dict[str, Any]:
    return {
        "_base_dir": str(tmp_path),
        "scenario": {"name": "t3", "start": "2024-03-04T00:00:00Z", "hours": 24,
                     "slot_minutes": 15, "currency": "USD"},
        "datacenters": [
            {"name": "a", "region": "ZA", "timezone": "UTC", "pue": 1.2},
            {"name": "b", "region": "ZB", "timezone": "Europe/Berlin", "pue": 1.3,
             "idle_power_kw": 5.0},
            {"name": "c", "region": "ZC", "pue": 1.1},
        ],
        "pools": [{"datacenter": d, "gpu_type": "A100", "count": 16, "idle_power_w": 60.0,
                   "max_power_w": 400.0} for d in "abc"],
        "network": {"latency_matrix": "lat.csv", "bandwidth_gbps": 25.0,
                    "transfer_energy_kwh_per_gb": 0.01},
        "links": [{"src": "a", "dst": "c", "latency_ms": 12.0, "bandwidth_gbps": 100.0}],
        "jobs": {"set": "wl", "align": "start", "offset_hours": 1.0, "homes": ["a", "b"],
                 "work_scale": 2.0},
        "inference": [{"job_id": "svc", "app": "bert", "home": "b", "gpu_type": "A100",
                       "gpus": 2, "max_latency_ms": 50.0}],
    }


def test_build_composes_sites_links_jobs_and_cube(store: Store, tmp_path: Path) -> None:
    _matrix(tmp_path)
    sc = build_scenario(store, _config(tmp_path))
    assert sc.n_slots == 96 and sc.slot_s == 900 and sc.currency == "USD"
    assert sc.link("a", "b").latency_ms == pytest.approx(21.0)  # mean of 20 and 22
    assert sc.link("b", "a").bandwidth_gbps == 25.0
    explicit = sc.link("a", "c")
    assert (explicit.latency_ms, explicit.bandwidth_gbps) == (12.0, 100.0)
    assert explicit.transfer_energy_kwh_per_gb == 0.01  # inherited from [network]
    training = sc.jobs_of_kind("training")
    # j3 arrives 277 h after j0: outside the 24-h horizon once aligned.
    assert [j.job_id for j in training] == ["j0", "j1", "j2"]
    assert training[0].arrival == START + pd.Timedelta(hours=1)
    assert [j.home for j in training] == ["a", "b", "a"]
    assert sc.jobs_of_kind("inference")[0].end == sc.end
    # Hourly series step-held into 15-minute slots.
    price = sc.grid["price_per_kwh"].sel(region="ZB").values
    assert price[0] == pytest.approx(0.202) and price[3] == pytest.approx(0.202)
    assert price[4] == pytest.approx(0.203)


def test_work_scale_stretches_work_and_deadline(store: Store, tmp_path: Path) -> None:
    _matrix(tmp_path)
    cfg = _config(tmp_path)
    one = copy.deepcopy(cfg)
    one["jobs"]["work_scale"] = 1.0
    a, b = build_scenario(store, one), build_scenario(store, cfg)
    ja, jb = a.jobs_of_kind("training")[0], b.jobs_of_kind("training")[0]
    assert jb.work_samples == pytest.approx(2 * ja.work_samples)
    assert (jb.deadline - jb.arrival) == 2 * (ja.deadline - ja.arrival)


def test_min_deadline_widens_short_windows_only(store: Store, tmp_path: Path) -> None:
    _matrix(tmp_path)
    cfg = _config(tmp_path)
    base = build_scenario(store, cfg).jobs_of_kind("training")
    windows = sorted((j.deadline - j.arrival).total_seconds() / 3600 for j in base)
    cut = (windows[0] + windows[-1]) / 2
    cfg["jobs"]["min_deadline_h"] = cut
    widened = build_scenario(store, cfg).jobs_of_kind("training")
    for before, after in zip(base, widened, strict=True):
        old_h = (before.deadline - before.arrival).total_seconds() / 3600
        new_h = (after.deadline - after.arrival).total_seconds() / 3600
        assert new_h == pytest.approx(max(old_h, cut))
    cfg["jobs"]["min_deadline_h"] = -1.0
    with pytest.raises(BuildError, match="min_deadline_h: -1.0 must be greater than 0"):
        build_scenario(store, cfg)


def test_missing_series_are_all_listed(store: Store, tmp_path: Path) -> None:
    _matrix(tmp_path)
    cfg = _config(tmp_path)
    cfg["datacenters"][0]["region"] = "NOPE"
    cfg["datacenters"][2]["region"] = "ALSO-NOPE"
    store.write_grid_series(pd.DataFrame({"time_utc": [START], "region": "HALF",
                                          "carbon_g_per_kwh": [1.0]}))
    cfg["datacenters"][1]["region"] = "HALF"
    with pytest.raises(BuildError, match=r"lacks grid series for: ALSO-NOPE \(price and "
                       r"carbon\), HALF \(price\), NOPE \(price and carbon\)"):
        build_scenario(store, cfg)


@pytest.mark.parametrize(("edit", "pattern"), [
    (lambda c: c["scenario"].update(start="2030-01-01T00:00:00Z"),
     r"do not cover the horizon .*: no grid series for regions \[.*\]; import that period"),
    (lambda c: c["jobs"].update(set="ghost"), r"set 'ghost' is not in the store.*wl"),
    (lambda c: c["jobs"].pop("homes"), r"homes \['unassigned'\].*not datacenters"),
    (lambda c: c["datacenters"][2].update(grid_zone="ZZ"), r"lacks zones \['ZZ'\]"),
    (lambda c: c["scenario"].update(hours=24.1), r"multiple of the slot"),
    (lambda c: c["scenario"].update(currency="EUR"), r"currency|EUR"),
    (lambda c: c["pools"][0].update(colour="red"), r"unknown keys \['colour'\]"),
    (lambda c: c["pools"][0].pop("count"), r"\[\[pools\]\] entry 0 lacks 'count'"),
    (lambda c: c.update(extras={}), r"unknown config sections \['extras'\]"),
    (lambda c: c["scenario"].update(name="wl"), r"names a job set"),
])
def test_bad_configs_say_what_to_fix(store: Store, tmp_path: Path, edit: Any,
                                     pattern: str) -> None:
    _matrix(tmp_path)
    cfg = _config(tmp_path)
    edit(cfg)
    with pytest.raises(BuildError, match=pattern):
        build_scenario(store, cfg)


LLM_JOB = {"job_id": "llm", "model_config": "no-such-config.json", "seq_len": 1024,
           "global_batch": 8, "tokens": 1e9, "home": "a"}
"""A ``[[jobs.llm]]`` entry: its names are checked before its model config is read."""

NAME_FIELDS = {
    # (section, key): an edit of the config giving that key an unknown name
    ("pools", "datacenter"): lambda c: c["pools"][0].update(datacenter="nope"),
    ("pools", "gpu_type"): lambda c: c["pools"][0].update(gpu_type="nope"),
    ("links", "src"): lambda c: c["links"][0].update(src="nope"),
    ("links", "dst"): lambda c: c["links"][0].update(dst="nope"),
    ("jobs", "homes"): lambda c: c["jobs"].update(homes=["a", "nope"]),
    ("inference", "app"): lambda c: c["inference"][0].update(app="nope"),
    ("inference", "home"): lambda c: c["inference"][0].update(home="nope"),
    ("inference", "gpu_type"): lambda c: c["inference"][0].update(gpu_type="nope"),
    ("datacenters", "region"): lambda c: c["datacenters"][0].update(region="nope"),
    ("datacenters", "grid_zone"): lambda c: c["datacenters"][0].update(grid_zone="nope"),
    ("jobs", "set"): lambda c: c["jobs"].update(set="nope"),
    ("jobs.llm", "home"): lambda c: c["jobs"].update(llm=[{**LLM_JOB, "home": "nope"}]),
    ("jobs.llm", "gpu_types"): lambda c: c["jobs"].update(
        llm=[{**LLM_JOB, "gpu_types": ["A100", "nope"]}]),
    ("supply", "datacenter"): lambda c: c.update(supply=[
        {"datacenter": "nope", "kind": "battery", "energy_kwh": 10.0, "power_kw": 5.0}]),
    ("supply", "series"): lambda c: c.update(supply=[
        {"datacenter": "a", "kind": "solar", "capacity_kw": 10.0, "series": "nope"}]),
    ("supply", "turbine_type"): lambda c: c.update(supply=[
        {"datacenter": "a", "kind": "wind", "capacity_kw": 10.0, "series": "nope",
         "turbine_type": "nope", "hub_height_m": 100.0}]),
    ("demand_charges", "datacenter"): lambda c: c.update(demand_charges=[
        {"datacenter": "nope", "price_per_kw_month": 20.0}]),
    ("grid_events", "datacenter"): lambda c: c.update(grid_events=[
        {"datacenter": "nope", "start": 1.0, "hours": 1.0, "limit_kw": 5.0}]),
}
"""Every key of the schema that names something the workbench or the store must know."""

FREE_FIELDS = {("scenario", "name"), ("scenario", "description"), ("scenario", "start"),
               ("scenario", "end"), ("scenario", "currency"), ("scenario", "fill"),
               ("datacenters", "name"), ("datacenters", "timezone"),
               ("network", "latency_matrix"), ("jobs", "align"), ("inference", "job_id"),
               ("jobs.llm", "job_id"), ("jobs.llm", "model_config_path"),
               ("jobs.llm", "purpose"), ("jobs.llm", "precision"), ("jobs.llm", "zero"),
               ("supply", "kind"),
               ("supply", "name"), ("demand_charges", "name"), ("demand_charges", "urdb"),
               ("grid_events", "start"), ("grid_events", "name")}
"""Text keys that name nothing to look up: new names, free text, times (parsed), a
currency (a pattern, checked against the series), enums and a timezone (validated by the
schema), a path (read)."""


def test_every_text_key_of_the_schema_is_checked_or_free() -> None:
    """A new text key must join NAME_FIELDS (and be checked at build) or FREE_FIELDS."""
    from workbench.config import _MODELS

    text = set()
    for section, model in _MODELS.items():
        for key, field in model.model_fields.items():
            if "str" in str(field.annotation) or "Literal" in str(field.annotation):
                text.add((section, key))
    assert text == set(NAME_FIELDS) | FREE_FIELDS, text ^ (set(NAME_FIELDS) | FREE_FIELDS)


@pytest.mark.parametrize("field", list(NAME_FIELDS), ids=[".".join(k) for k in NAME_FIELDS])
def test_every_name_a_config_gives_is_checked_against_what_is_known(
        store: Store, tmp_path: Path, field: tuple[str, str]) -> None:
    """An `[[inference]]` service with `app = "nope"` built, planned and was charged energy."""
    _matrix(tmp_path)
    cfg = _config(tmp_path)
    NAME_FIELDS[field](cfg)
    with pytest.raises(BuildError) as err:
        build_scenario(store, cfg)
    text = str(err.value)
    assert "'nope'" in text or "nope (price and carbon)" in text or "['nope']" in text, text
    if field[1] not in ("region", "grid_zone", "set"):
        assert text.startswith(f"[[{field[0]}]] entry" if field[0] != "jobs" else "[jobs]")
        assert "'nope'" in text
        assert f"{field[1]}: 'nope' is not " in text and "; known: " in text, text


def test_build_saves_and_reloads(store: Store, tmp_path: Path) -> None:
    _matrix(tmp_path)
    path = tmp_path / "sc.toml"
    path.write_text(_toml(_config(tmp_path)))
    built = build_and_save(store, path, "mine")
    loaded = store.load_scenario("mine")
    assert [j.job_id for j in loaded.jobs] == [j.job_id for j in built.jobs]
    assert {(lk.src, lk.dst) for lk in loaded.links} == {(lk.src, lk.dst) for lk in built.links}
    np.testing.assert_allclose(loaded.grid["price_per_kwh"].values,
                               built.grid["price_per_kwh"].values)
    assert load_config(path)["scenario"]["name"] == "t3"


def _two_configs(tmp_path: Path, edit: Any) -> tuple[Path, Path]:
    """The test config as a TOML file, and a second one with ``edit`` applied."""
    _matrix(tmp_path)
    cfg = _config(tmp_path)
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text(_toml(cfg))
    edit(cfg)
    second.write_text(_toml(cfg))
    return first, second


def test_cli_build_and_error_exit(store: Store, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = _two_configs(tmp_path, lambda c: c["datacenters"][0].update(region="NOPE"))
    db = store.path
    store.close()
    assert main(["--db", db, "scenario", "build", "cli3", "--config", str(good)]) == 0
    assert main(["--db", db, "scenario", "build", "cli4", "--config", str(bad)]) == 2
    assert "lacks grid series for: NOPE" in capsys.readouterr().err
    with Store(db) as again:
        assert again.scenario_names() == ["cli3"]


@pytest.mark.slow
def test_a_rebuild_that_differs_needs_replace(store: Store, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from helpers_store import store_digest

    path, longer = _two_configs(tmp_path, lambda c: c["scenario"].update(hours=36))
    db = store.path
    store.close()
    assert main(["--db", db, "scenario", "build", "x", "--config", str(path)]) == 0
    capsys.readouterr()
    kept = store_digest(db)
    # The same build again writes nothing; a different one under the name is refused.
    assert main(["--db", db, "scenario", "build", "x", "--config", str(path)]) == 0
    assert "already this build, nothing written" in capsys.readouterr().err
    assert main(["--db", db, "scenario", "build", "x", "--config", str(longer)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "n_slots 96 stored, 144 new" in err and "--replace" in err
    assert store_digest(db) == kept
    assert main(["--db", db, "scenario", "build", "x", "--config", str(longer),
                 "--replace"]) == 0
    assert "replacing the stored one" in capsys.readouterr().err
    with Store(db) as again:
        assert again.load_scenario("x").n_slots == 144


def _toml(cfg: dict[str, Any]) -> str:
    """A tiny TOML writer for the config dicts above (tables, arrays of tables, scalars)."""

    def value(v: Any) -> str:
        if isinstance(v, str):
            return '"' + v + '"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    out = []
    for key, section in cfg.items():
        if key.startswith("_"):
            continue
        entries = section if isinstance(section, list) else [section]
        for entry in entries:
            out.append(f"[[{key}]]" if isinstance(section, list) else f"[{key}]")
            out += [f"{k} = {value(v)}" for k, v in entry.items()]
    return "\n".join(out) + "\n"


# -- the shipped example on the real files ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.shared_data
def test_example_config_builds_from_real_data(shared_data: Path, tmp_path: Path) -> None:
    sc_dir = shared_data / "grid/sustain-cluster"
    with Store(tmp_path / "real.duckdb") as store:
        for z in ("US-CAL-CISO", "US-TEX-ERCO", "US-MIDA-PJM", "DE-LU"):
            import_grid(store, "electricitymaps-csv", sc_dir / f"carbon/{z}/{z}_2023_hourly.csv",
                        z)
            import_grid(store, "price-csv",
                        sc_dir / f"prices/{z}/{z}_electricity_prices_2023.csv", z)
        import_jobs(store, "pollux-workload",
                    shared_data / "jobs/pollux/workloads/workload-6.csv", "pollux-w6")
        sc = build_and_save(store, REPO / "examples/real_grid.toml")
        assert sc.name == "real4" and len(sc.datacenters) == 4 and len(sc.links) == 6
        assert sc.n_slots == 288 and sc.currency == "USD"
        assert len(sc.jobs_of_kind("training")) == 159  # one asks for 48 GPUs > max_gpus
        assert sc.link("virginia", "texas").latency_ms == pytest.approx(32.0)
        reloaded = store.load_scenario("real4")
        assert len(reloaded.jobs) == len(sc.jobs)


def test_second_scenario_falls_back_to_shipped_profiles_per_app(store: Store,
                                                                  tmp_path: Path) -> None:
    """A store holding profiles of some apps only (saved with an earlier scenario) still
    builds a scenario whose jobs use other apps: those come from the shipped profiles."""
    from workbench.perf import load_default_profiles

    store.save_profiles([p for p in load_default_profiles() if p.app == "cifar10"])
    _matrix(tmp_path)
    sc = build_scenario(store, _config(tmp_path))
    apps = {j.app for j in sc.jobs}
    assert {"ncf", "bert"} <= apps
    assert apps <= {p.app for p in sc.profiles}
@pytest.mark.parametrize("size", [-1.0, float("nan")])
def test_a_bad_dataset_size_is_a_one_line_error(store: Store, tmp_path: Path, size: float,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _matrix(tmp_path)
    cfg = _config(tmp_path)
    cfg["inference"][0]["dataset_gb"] = size
    bad = tmp_path / "bad.toml"
    bad.write_text(_toml(cfg))
    db = store.path
    store.close()
    assert main(["--db", db, "scenario", "build", "bad", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "dataset_gb" in err[0]


def test_a_horizon_past_the_data_says_import_that_period_once(store: Store,
                                                               tmp_path: Path) -> None:
    """Issue 24 item 6: the cube's cause and the build's fix, not both fixes."""
    _matrix(tmp_path)
    cfg = _config(tmp_path)
    cfg["scenario"]["hours"] = 72  # the series end after 58 h
    with pytest.raises(BuildError) as err:
        build_scenario(store, cfg)
    text = str(err.value)
    assert text.count("import that period") == 1 and "is missing for region" in text
    assert "fill = 'hold'" in text and "fill='hold'" not in text


def test_a_pool_of_any_known_device_gets_predicted_profiles(store: Store,
                                                             tmp_path: Path) -> None:
    """Issue 24 item 6: a pool of H100s (in the device table, no shipped profile) builds,
    its profiles predicted and labelled so; an unknown device names the fix, not a fit."""
    from workbench.model import ScenarioError

    _matrix(tmp_path)
    cfg = _config(tmp_path)
    cfg["pools"][1]["gpu_type"] = "H100"
    sc = build_scenario(store, cfg)
    h100 = [p for p in sc.profiles if p.gpu_type == "H100"]
    assert {p.app for p in h100} == {j.app for j in sc.jobs if j.is_training}
    assert all(p.predicted and p.derived for p in h100)
    assert all("predicted from the" in p.source and "scaled to 700 W" in p.source
               for p in h100)
    cfg["pools"][1]["gpu_type"] = "NoSuchGPU"
    with pytest.raises((BuildError, ScenarioError)) as err:
        build_scenario(store, cfg)
    assert "workbench devices add" in str(err.value) and "fit throughput" not in str(err.value)


def test_a_pool_of_a_device_the_operator_added_gets_predicted_profiles(
        store: Store, tmp_path: Path) -> None:
    """Issue 35 item 4: the build's own error says to add the device; once added
    (``devices add``) a pool of it builds, its profiles predicted on its figures."""
    from workbench.compute.devices import BUILTIN_DEVICES, save_device

    _matrix(tmp_path)
    cfg = _config(tmp_path)
    cfg["pools"][1]["gpu_type"] = "B200-lab"
    with pytest.raises(BuildError, match="devices add"):
        build_scenario(store, cfg)
    save_device(store, replace(BUILTIN_DEVICES["H100"], name="B200-lab", tdp_w=1000.0))
    sc = build_scenario(store, cfg)
    mine = [p for p in sc.profiles if p.gpu_type == "B200-lab"]
    assert {p.app for p in mine} == {j.app for j in sc.jobs if j.is_training}
    assert all(p.predicted and "scaled to 1000 W" in p.source for p in mine)
