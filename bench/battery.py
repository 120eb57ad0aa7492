"""A real-grid battery: every policy on scenarios built from ``../shared/data`` only.

Usage::

    python bench/battery.py [--data ../shared/data] [--quick] [--only NAME,...]
                            [--policies P,...] [--json] [--db-dir DIR]
                            [--forecast-model auto|lear|auto-lear|...]
                            [--forecast-mode perfect|...] [--power-limits MENU]

Each scenario is built the way a user would: the grid series and job traces are imported into
a scratch DuckDB store with ``workbench import ...`` and the scenario with
``workbench scenario build NAME --config FILE`` from a TOML file written here (see
:data:`SCENARIOS`). Every policy runs with an honest forecast: the product's default
(``workbench.forecast.default_forecast_mode``: the tariff itself for tariff prices; for market
prices the backtested ``model`` forecast where 28 days of history precede the week, else
yesterday's prices, ``seasonal-naive``), fitted once per scenario. ``--forecast-model`` picks
the ``model`` forecast's forecaster (default ``auto``; another writes no results file: compare
its printed rows, e.g. ``--only us3-jul-burst --policies lookahead --forecast-model lear``).

For each scenario and policy: cost, carbon, deadline misses, round trips, wall time; the
hindsight bound (``offline``'s LP/MILP optimum) and its replay; and::

    captured = (asap_cost - cost) / (asap_cost - bound_cost)

the share of the saving the hindsight bound says is achievable. Differences, not ratios, so
negative prices are fine; NaN where the bound saves less than 0.1 % of |asap_cost| (nothing to
capture). ``--json`` prints the rows ``{scenario, policy, default, captured, deadline_misses,
offline_misses, cost, bound_cost, asap_cost, jobs, wall_s}``. Writes
``docs/results/battery.{csv,md,png}`` (not with ``--only`` or ``--policies``).

Derived inputs (documented where they deviate from the raw file): the Philly week stream is
the week of 2017-11-26 of Pollux's ``philly.csv``, jobs of at most 12 h and 8 GPUs, every
third job dropped (2,285 jobs), written to a temporary CSV in the importer's own format. ES,
NO and BR have no market prices in the data: their price is a URDB time-of-use tariff
(Virginia, Ann Arbor), a published tariff in USD. NYISO has 45 minutes of 15-minute LBMPs
(2016-02-18), with AVERT's NY hours of 18 February (hour of year 1176-1199) dated 2016-02-18.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from common import RESULTS, run_policy, write_table

from workbench import runner
from workbench.cli import main as cli
from workbench.cli._args import parse_power_limits
from workbench.forecast import DEFAULT_MODEL, FORECAST_MODES, MODELS
from workbench.model import Scenario
from workbench.policies import unsuitable
from workbench.policies.base import HindsightBound
from workbench.policies.deadlines import required_share
from workbench.store import Store

ROOT = Path(__file__).resolve().parent.parent
SC_ZONES = ("US-CAL-CISO", "US-TEX-ERCO", "US-MIDA-PJM", "DE-LU", "JP-TK", "SG")
POLICIES = ("asap-home", "greedy", "cheapest-at-arrival", "wait-for-cheap", "carbon-scaling",
            "goodput-only", "follow-renewables", "power-limit-only", "threshold", "lyapunov",
            "lookahead", "offline")
QUICK = ("us3-jul-burst", "asia-eu-jan-burst", "tou-us-jul", "es-no-br-jan")
_TZ = {"US-CAL-CISO": "America/Los_Angeles", "US-TEX-ERCO": "America/Chicago",
       "US-MIDA-PJM": "America/New_York", "DE-LU": "Europe/Berlin", "JP-TK": "Asia/Tokyo",
       "SG": "Asia/Singapore", "ES": "Europe/Madrid", "NO": "Europe/Oslo",
       "BR": "America/Sao_Paulo", "NYC": "America/New_York", "WEST-NY": "America/New_York",
       "VA-TOU": "America/New_York", "MI-TOU": "America/Detroit"}
_GRID_ZONE = {"DE-LU": "DE", "BR": "BR-CS", "VA-TOU": "US-MIDA-PJM", "MI-TOU": "US-MIDA-PJM"}


def default_policy() -> str:
    """The product's default policy (``workbench plan``'s ``--policy`` default)."""
    from workbench.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    plan = sub.choices["plan"]  # type: ignore[index]
    return str(next(a.default for a in plan._actions if a.dest == "policy"))


def forecast_mode(scenario: Scenario) -> str:
    """The honest default forecast: the product's rule (the runner decides it)."""
    return runner.forecast_mode(runner.RunSpec(scenario.name), scenario)


# -- imports ------------------------------------------------------------------------------
def _imports(data: Path, tmp: Path) -> dict[str, list[list[str]]]:
    """Per series/job-set key, the ``workbench import`` argument lists that make it."""
    sc = data / "grid" / "sustain-cluster"
    em = data / "grid" / "electricitymaps"
    out: dict[str, list[list[str]]] = {}
    for z in SC_ZONES:
        out[z] = [["grid", "electricitymaps-csv", str(sc / "carbon" / z / f"{z}_2023_hourly.csv"),
                   "--region", z],
                  ["grid", "price-csv", str(sc / "prices" / z /
                                            f"{z}_electricity_prices_2023.csv"), "--region", z]]
    for z, tariff in (("ES", "virginia"), ("NO", "ann_arbor"), ("BR", "virginia")):
        out[z] = [["grid", "electricitymaps-csv", str(em / f"{z}_2022_hourly.csv"),
                   "--region", z],
                  ["grid", "urdb-json", str(data / "tariffs" / f"{tariff}.json"), "--region", z,
                   "--start", "2022-01-01T00:00:00Z", "--end", "2023-01-01T00:00:00Z",
                   "--timezone", _TZ[z]]]
    for region, tariff in (("VA-TOU", "virginia"), ("MI-TOU", "ann_arbor")):
        out[region] = [
            ["grid", "electricitymaps-csv",
             str(sc / "carbon" / "US-MIDA-PJM" / "US-MIDA-PJM_2023_hourly.csv"),
             "--region", region],
            ["grid", "urdb-json", str(data / "tariffs" / f"{tariff}.json"), "--region", region,
             "--start", "2023-01-01T00:00:00Z", "--end", "2024-01-01T00:00:00Z",
             "--timezone", _TZ[region]]]
    lmp = data / "grid" / "nyiso" / "lmp.csv"
    avert = data / "grid" / "avert" / "AVERT_2023_CO2_lb_per_kwh.csv"
    for region, zone in (("NYC", "N.Y.C."), ("WEST-NY", "WEST")):
        out[region] = [["grid", "nyiso-lmp", str(lmp), "--region", region, "--column", zone],
                       ["grid", "csv", str(_avert_day(avert, tmp)), "--region", region,
                        "--time-column", "time", "--value-column", "NY", "--kind", "carbon",
                        "--unit", "lb/kWh"]]
    pol = data / "jobs" / "pollux"
    out["pollux-w1"] = [["jobs", "pollux-workload", str(pol / "workloads" / "workload-1.csv"),
                         "--into", "pollux-w1", "--replace"]]
    out["pollux-w3-hi"] = [["jobs", "pollux-workload",
                            str(pol / "workloads-1.5" / "workload-3.csv"),
                            "--into", "pollux-w3-hi", "--replace"]]
    out["pollux-w5-lo"] = [["jobs", "pollux-workload",
                            str(pol / "workloads-0.5" / "workload-5.csv"),
                            "--into", "pollux-w5-lo", "--replace"]]
    out["philly-week"] = [["jobs", "philly", str(_philly_week(data, tmp)), "--into",
                           "philly-week", "--app", "mix", "--slack", "3", "--replace"]]
    out["philly-mix"] = [["jobs", "philly", str(_philly_week(data, tmp, limit=300)), "--into",
                          "philly-mix", "--app", "mix", "--slack", "3", "--replace"]]
    out["alibaba-mix"] = [["jobs", "alibaba-pods",
                           str(data / "jobs" / "alibaba-v2023" / "openb_pod_list_default.csv"),
                           "--into", "alibaba-mix", "--app", "mix", "--slack", "3",
                           "--replace"]]
    return out


def _avert_day(avert: Path, tmp: Path) -> Path:
    """AVERT's NY hours of 18 Feb (hour of year 1176-1199) dated 2016-02-18, UTC.

    AVERT rows are hours of a non-leap year without dates; 18 Feb lies before 29 Feb, so the
    hour of year is the same in 2016. The importer's ``avert`` format refuses a leap year.
    """
    path = tmp / "avert_ny_2016-02-18.csv"
    a = pd.read_csv(avert, encoding="utf-8-sig")
    day = a.iloc[1176:1200][["NY"]].copy()
    day.insert(0, "time", pd.date_range("2016-02-18", periods=24, freq="h", tz="UTC")
               .strftime("%Y-%m-%dT%H:%M:%SZ"))
    day.to_csv(path, index=False)
    return path


def _philly_week(data: Path, tmp: Path, limit: int | None = None) -> Path:
    """The Philly week stream (see the module docstring), as a CSV in the trace's format."""
    name = "philly_week.csv" if limit is None else f"philly_week_{limit}.csv"
    path = tmp / name
    if path.exists():
        return path
    p = pd.read_csv(data / "jobs" / "pollux" / "philly.csv", parse_dates=["timestamp"])
    p = p.sort_values("timestamp", kind="stable")
    t0 = pd.Timestamp("2017-11-26")
    w = p[(p.timestamp >= t0) & (p.timestamp < t0 + pd.Timedelta(days=7))
          & (p.duration <= 12 * 3600) & (p.num_gpus <= 8)]
    w = w[(pd.RangeIndex(len(w)) % 3) != 2]
    if limit is not None:
        w = w.iloc[:: max(len(w) // limit, 1)].head(limit)
    w.to_csv(path, index=False, date_format="%Y-%m-%d %H:%M:%S")
    return path


# -- scenarios ----------------------------------------------------------------------------
def _dc(name: str, region: str, pue: float = 1.25, idle_kw: float = 30.0) -> dict[str, Any]:
    return {"name": name, "region": region, "grid_zone": _GRID_ZONE.get(region, region),
            "timezone": _TZ[region], "pue": pue, "idle_power_kw": idle_kw}


def _pool(dc: str, gpu: str, count: int) -> dict[str, Any]:
    power = {"A100": (60.0, 400.0), "H800": (90.0, 700.0), "Ascend910B": (80.0, 400.0)}[gpu]
    return {"datacenter": dc, "gpu_type": gpu, "count": count, "idle_power_w": power[0],
            "max_power_w": power[1]}


def _spec(name: str, desc: str, start: str, days: float, dcs: list[dict[str, Any]],
          pools: list[dict[str, Any]], jobs: dict[str, Any], *, slot_minutes: int = 60,
          tariff: bool = False, links: list[dict[str, Any]] | None = None,
          inference: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "scenario": {"name": name, "description": desc, "start": start,
                     "slot_minutes": slot_minutes, "currency": "USD", "fill": "hold"},
        "datacenters": dcs, "pools": pools, "jobs": jobs}
    if days >= 1:
        cfg["scenario"]["days"] = days
    else:
        cfg["scenario"]["hours"] = days * 24
    if links is None:
        cfg["network"] = {"latency_matrix": "@MATRIX@", "bandwidth_gbps": 10.0,
                          "transfer_energy_kwh_per_gb": 0.006}
    else:
        cfg["network"] = {"bandwidth_gbps": 10.0, "transfer_energy_kwh_per_gb": 0.006}
        cfg["links"] = links
    if inference:
        cfg["inference"] = inference
    return {"config": cfg, "tariff": tariff}


def _burst(set_name: str, homes: list[str], scale: float = 10.0) -> dict[str, Any]:
    return {"set": set_name, "align": "start", "offset_hours": 6.0, "homes": homes,
            "work_scale": scale, "max_gpus": 32, "min_deadline_h": 6.0}


def scenarios() -> dict[str, dict[str, Any]]:
    """Every battery scenario: its ``scenario build`` config and whether prices are a tariff."""
    us = [_dc("california", "US-CAL-CISO"), _dc("texas", "US-TEX-ERCO", 1.35),
          _dc("virginia", "US-MIDA-PJM", 1.3, 40.0)]
    us_pools = [_pool("california", "A100", 32), _pool("texas", "A100", 32),
                _pool("virginia", "H800", 32), _pool("virginia", "A100", 16)]
    asia = [_dc("frankfurt", "DE-LU", 1.2), _dc("tokyo", "JP-TK", 1.3),
            _dc("singapore", "SG", 1.4), _dc("virginia", "US-MIDA-PJM", 1.3, 40.0)]
    asia_pools = [_pool("frankfurt", "H800", 32), _pool("tokyo", "A100", 32),
                  _pool("tokyo", "Ascend910B", 16), _pool("singapore", "H800", 16),
                  _pool("virginia", "A100", 32)]
    six = [_dc("california", "US-CAL-CISO"), _dc("texas", "US-TEX-ERCO", 1.35),
           _dc("frankfurt", "DE-LU", 1.2), _dc("tokyo", "JP-TK", 1.3), _dc("singapore", "SG", 1.4)]
    six_pools = [_pool("california", "A100", 24), _pool("texas", "H800", 16),
                 _pool("frankfurt", "H800", 24), _pool("tokyo", "A100", 24),
                 _pool("singapore", "A100", 16)]
    enb = [_dc("madrid", "ES", 1.2), _dc("oslo", "NO", 1.1), _dc("saopaulo", "BR", 1.4)]
    enb_pools = [_pool("madrid", "A100", 32), _pool("oslo", "A100", 24),
                 _pool("oslo", "H800", 8), _pool("saopaulo", "H800", 24)]
    enb_links = [{"src": "madrid", "dst": "oslo", "latency_ms": 45.0},
                 {"src": "madrid", "dst": "saopaulo", "latency_ms": 190.0},
                 {"src": "oslo", "dst": "saopaulo", "latency_ms": 230.0}]
    infer = [{"job_id": "infer-chat", "app": "bert", "home": "virginia", "gpu_type": "A100",
              "gpus": 4, "max_latency_ms": 40.0, "load_fraction": 0.5}]
    out: dict[str, dict[str, Any]] = {}
    for season, start in (("jan", "2023-01-09T00:00:00Z"), ("jul", "2023-07-10T00:00:00Z")):
        out[f"us3-{season}-burst"] = _spec(
            f"us3-{season}-burst", f"CAISO, ERCOT, PJM; {season} 2023; Pollux workload 1",
            start, 3, us, us_pools, _burst("pollux-w1", ["california", "texas", "virginia"]),
            inference=infer)
        out[f"asia-eu-{season}-burst"] = _spec(
            f"asia-eu-{season}-burst", f"DE-LU, JP-TK, SG, PJM; {season} 2023; Pollux "
            "workload 3 at 1.5x load", start, 3, asia, asia_pools,
            _burst("pollux-w3-hi", ["frankfurt", "tokyo", "singapore", "virginia"]))
        out[f"tou-us-{season}"] = _spec(
            f"tou-us-{season}", f"two URDB time-of-use tariffs (Virginia, Ann Arbor), PJM "
            f"carbon; {season} 2023; Pollux workload 5 at 0.5x load", start, 3,
            [_dc("va", "VA-TOU", 1.3), _dc("mi", "MI-TOU", 1.25)],
            [_pool("va", "A100", 32), _pool("mi", "H800", 16)],
            _burst("pollux-w5-lo", ["va", "mi"]), tariff=True,
            links=[{"src": "va", "dst": "mi", "latency_ms": 20.0}])
    for season, start in (("jan", "2022-01-10T00:00:00Z"), ("jul", "2022-07-11T00:00:00Z")):
        out[f"es-no-br-{season}"] = _spec(
            f"es-no-br-{season}", f"Electricity Maps ES, NO, BR carbon, URDB tariff prices; "
            f"{season} 2022; Pollux workload 1", start, 3, enb, enb_pools,
            _burst("pollux-w1", ["madrid", "oslo", "saopaulo"]), tariff=True, links=enb_links)
    out["six-zone-jul"] = _spec(
        "six-zone-jul", "CAISO, ERCOT, DE-LU, JP-TK, SG (five datacenters); July 2023; "
        "Philly-derived mix (300 jobs)", "2023-07-17T00:00:00Z", 3, six, six_pools,
        {"set": "philly-mix", "align": "start", "offset_hours": 2.0,
         "homes": [d["name"] for d in six], "max_gpus": 8, "min_deadline_h": 6.0})
    out["alibaba-jan"] = _spec(
        "alibaba-jan", "PJM, JP-TK, SG; January 2023; Alibaba v2023 pods (400)",
        "2023-01-16T00:00:00Z", 7,
        [_dc("virginia", "US-MIDA-PJM", 1.3), _dc("tokyo", "JP-TK", 1.3),
         _dc("singapore", "SG", 1.4)],
        [_pool("virginia", "A100", 32), _pool("tokyo", "H800", 16),
         _pool("singapore", "A100", 16)],
        {"set": "alibaba-mix", "align": "start", "offset_hours": 1.0,
         "homes": ["virginia", "tokyo", "singapore"], "max_gpus": 8, "min_deadline_h": 6.0})
    out["philly-week-stream"] = _spec(
        "philly-week-stream", "CAISO, ERCOT, PJM, DE-LU; January 2023; the Philly week "
        "stream (2,285 jobs)", "2023-01-09T00:00:00Z", 7,
        [*us, _dc("frankfurt", "DE-LU", 1.2)],
        [_pool("california", "A100", 48), _pool("texas", "A100", 48),
         _pool("virginia", "H800", 32), _pool("frankfurt", "H800", 32)],
        {"set": "philly-week", "align": "start", "offset_hours": 0.0,
         "homes": ["california", "texas", "virginia", "frankfurt"], "max_gpus": 8,
         "min_deadline_h": 6.0})
    out["nyiso-45min"] = _spec(
        "nyiso-45min", "NYISO real-time LBMP, N.Y.C. and WEST zones, 15-min slots, 45 min "
        "(2016-02-18); AVERT NY carbon", "2016-02-18T05:15:00Z", 0.75 / 24,
        [_dc("nyc", "NYC", 1.3), _dc("buffalo", "WEST-NY", 1.2)],
        [_pool("nyc", "A100", 16), _pool("buffalo", "A100", 16)],
        {"set": "pollux-w5-lo", "align": "start", "offset_hours": 0.0,
         "homes": ["nyc", "buffalo"], "work_scale": 0.01, "max_gpus": 8, "limit": 12},
        slot_minutes=15, links=[{"src": "nyc", "dst": "buffalo", "latency_ms": 8.0}])
    return out


def _toml(cfg: Mapping[str, Any]) -> str:
    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return json.dumps(str(v))

    lines: list[str] = []
    for key, body in cfg.items():
        if isinstance(body, list):
            for item in body:
                lines.append(f"[[{key}]]")
                lines += [f"{k} = {val(v)}" for k, v in item.items()]
                lines.append("")
        else:
            lines.append(f"[{key}]")
            lines += [f"{k} = {val(v)}" for k, v in body.items()]
            lines.append("")
    return "\n".join(lines)


def build(data: Path, db_dir: Path, names: Sequence[str], tmp: Path,
          specs: Mapping[str, dict[str, Any]] | None = None) -> dict[str, Scenario]:
    """Import what each scenario needs and build it with ``workbench scenario build``
    (``specs``: :func:`scenarios`, or a what-if of them).

    One store per scenario: a built scenario saves its (app-filtered) profiles into the
    store, and a later build in the same store would read only those.
    """
    specs = scenarios() if specs is None else specs
    imports = _imports(data, tmp)
    matrix = data / "grid" / "electricitymaps" / "gcp_latency_matrix.csv"
    out = {}
    for n in names:
        cfg = specs[n]["config"]
        db = db_dir / f"{n}.duckdb"
        keys = dict.fromkeys([d["region"] for d in cfg["datacenters"]] + [cfg["jobs"]["set"]])
        # The commands' messages ("imported 8760 price rows ...") go to stderr: stdout is
        # the table, or under --json the JSON alone.
        with contextlib.redirect_stdout(sys.stderr):
            for key in keys:
                for argv in imports[key]:
                    if cli(["--db", str(db), "import", *argv]) != 0:
                        sys.exit(f"import failed: workbench import {' '.join(argv)}")
            path = tmp / f"{n}.toml"
            path.write_text(_toml(cfg).replace("@MATRIX@", str(matrix)))
            if cli(["--db", str(db), "scenario", "build", n, "--config", str(path)]) != 0:
                sys.exit(f"scenario build failed: {n} ({path})")
        with Store(db) as store:
            out[n] = store.load_scenario(n)
    return out


# -- runs ---------------------------------------------------------------------------------
def captured(asap: float, cost: float, bound: float) -> float:
    """``(asap - cost) / (asap - bound)``; NaN when the bound saves < 0.1 % of ``|asap|``."""
    room = asap - bound
    if not (math.isfinite(room) and room > 1e-3 * max(abs(asap), 1e-9)):
        return math.nan
    return (asap - cost) / room


def run_scenario(name: str, sc: Scenario, policies: Sequence[str],
                 default: str, power_limits: tuple[float, ...] | None = None,
                 forecast_model: str = DEFAULT_MODEL, what_if: str | None = None
                 ) -> list[dict[str, Any]]:
    mode = forecast_mode(sc) if what_if is None else what_if
    # The model forecast is fitted once per scenario, shared by its policies' runs.
    fitted = runner.fit_forecast(sc, mode, forecast_model)
    runs: dict[str, tuple[dict[str, Any], float]] = {}
    shorts: dict[str, float] = {}
    off_bound: HindsightBound | None = None
    # A policy that refuses the scenario (follow-renewables without own supply) is left out.
    order = ["asap-home", "offline"] + [p for p in policies if p not in ("asap-home", "offline")
                                        and unsuitable(p, sc) is None]
    for pol_name in order:
        res, wall, bound_of = run_policy(sc, pol_name, fitted, power_limits, what_if)
        if bound_of is not None:
            off_bound = bound_of
        runs[pol_name] = (res.metrics, wall)
        shorts[pol_name] = required_shortfall(sc, res.jobs)
        m = res.metrics
        print(f"  {name:>20} {pol_name:>20}: cost {m['cost']:10.2f}  carbon "
              f"{m['carbon_kg']:9.1f} kg  misses {m['deadline_misses']:3d}  round trips "
              f"{m.get('round_trips', 0):3d}  {wall:6.1f} s", file=sys.stderr, flush=True)
    menu = runner.RunSpec(sc.name).power_limits if power_limits is None else power_limits
    asap = float(runs["asap-home"][0]["cost"])
    off_m, _ = runs["offline"]
    assert off_bound is not None, "the hindsight plan reports its bound"
    bound = off_bound.cost
    rows = []
    for pol_name in order:
        if pol_name not in policies:
            continue
        m, wall = runs[pol_name]
        rows.append({
            "scenario": name, "policy": pol_name, "default": pol_name == default,
            "captured": captured(asap, float(m["cost"]), bound),
            "deadline_misses": int(m["deadline_misses"]),
            "offline_misses": int(off_m["deadline_misses"]),
            "cost": float(m["cost"]), "bound_cost": bound, "asap_cost": asap,
            "jobs": int(m["jobs_total"]), "wall_s": wall,
            # Beyond the row: context for the tables.
            "carbon_kg": float(m["carbon_kg"]), "round_trips": int(m.get("round_trips", 0)),
            "unfinished": int(m["jobs_unfinished"]),
            "required_short": shorts[pol_name],
            "undone_work": float(m["unfinished_work_jobs"]),
            "migrations": int(m["migrations"]), "forecast": mode,
            "forecast_model": forecast_model if mode == "model" else "",
            "bound_kind": off_bound.kind, "slots": sc.n_slots,
            "power_limits": ",".join(f"{f:g}" for f in menu) or "none",
        })
    return rows


def required_shortfall(sc: Scenario, jobs: pd.DataFrame) -> float:
    """Work left undone that was due within the horizon, in whole jobs: ``sum_j max(s_j -
    done_j, 0)`` with ``s_j`` the share the hindsight bound must do
    (:func:`workbench.policies.deadlines.required_share`). A policy that defers a long job's
    work past the horizon end pays less in the week, not in the job's life."""
    done = dict(zip(jobs["job_id"], 1.0 - jobs["remaining"].astype(float), strict=True))
    return float(sum(max(required_share(sc, j) - done.get(j.job_id, 0.0), 0.0)
                     for j in sc.jobs if j.is_training))


JSON_KEYS = ("scenario", "policy", "default", "captured", "deadline_misses", "offline_misses",
             "cost", "bound_cost", "asap_cost", "jobs", "wall_s")


def plot(table: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    pivot = table.pivot(index="scenario", columns="policy", values="captured")
    pols = [p for p in POLICIES if p in pivot.columns and p != "asap-home"]
    fig, ax = plt.subplots(figsize=(13, 5.5))
    w = 0.8 / max(len(pols), 1)
    x = np.arange(len(pivot.index))
    for i, p in enumerate(pols):
        vals = pivot[p].to_numpy(dtype=float)
        ax.bar(x + i * w, np.clip(np.nan_to_num(vals, nan=0.0), -0.5, 1.5), w, label=p)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.axhline(0.9, color="grey", lw=0.6, ls=":")
    ax.set_xticks(x + 0.4 - w / 2)
    ax.set_xticklabels(pivot.index, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("captured = (asap - cost) / (asap - hindsight bound)  [clipped to -0.5..1.5]")
    ax.set_title("Share of the hindsight saving each policy captures (honest forecast)")
    ax.legend(fontsize=7, ncol=5)
    fig.tight_layout()
    fig.savefig(RESULTS / "battery.png", dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--db-dir", type=Path, default=None,
                    help="folder for the scratch stores (default: a temp folder)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--forecast-model", default=DEFAULT_MODEL, choices=MODELS,
                    help=f"forecaster of the model forecast (default {DEFAULT_MODEL}; another "
                    "writes no results file)")
    ap.add_argument("--forecast-mode", default=None, choices=FORECAST_MODES,
                    help="a what-if: every policy told this forecast instead of the honest "
                    "default (e.g. perfect: what a better forecast could be worth; writes no "
                    "results file)")
    ap.add_argument("--lyapunov-V", default="",
                    help="comma-separated V values: run only lyapunov at each V and write "
                    "docs/results/battery_v.* (is the default V within 5 %% of the best?)")
    ap.add_argument("--power-limits", default=None,
                    help="the GPU power-limit menu every policy gets ('default', fractions, or "
                    "none; as `workbench plan --power-limits`; unset: the runs' default, the "
                    "default menu); the hindsight bound (its LP) stays at full power")
    ap.add_argument("--update", default="",
                    help="re-run only these policies (with asap-home and offline for the bound) "
                    "and replace their rows in docs/results/battery.csv")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    args.data = args.data.resolve()  # the scenario files are written elsewhere (tmp)
    if not args.data.is_dir():
        sys.exit(f"no real data at {args.data}; pass --data DIR")
    specs = scenarios()
    names = (args.only.split(",") if args.only else list(QUICK) if args.quick else list(specs))
    unknown = sorted(set(names) - set(specs))
    if unknown:
        sys.exit(f"unknown scenarios {unknown}; choose from {', '.join(specs)}")
    policies = [p for p in args.policies.split(",") if p]
    try:
        menu = None if args.power_limits is None else parse_power_limits(args.power_limits)
    except ValueError as exc:
        sys.exit(str(exc))
    if args.update:
        policies = [p for p in args.update.split(",") if p]
    tmp = Path(tempfile.mkdtemp(prefix="wb-battery-"))
    if args.lyapunov_V:
        v_sweep(args.data, tmp, names, [float(v) for v in args.lyapunov_V.split(",")])
        return
    db_dir = args.db_dir or tmp
    db_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    built = build(args.data, db_dir, names, tmp)
    default = default_policy()
    rows: list[dict[str, Any]] = []
    for n in names:
        rows += run_scenario(n, built[n], policies, default, menu, args.forecast_model,
                             args.forecast_mode)
    total = time.perf_counter() - t0
    table = pd.DataFrame(rows)
    if args.json:
        print(json.dumps([{k: r[k] for k in JSON_KEYS} for r in rows], indent=1,
                         default=lambda v: None if isinstance(v, float) and math.isnan(v)
                         else v).replace("NaN", "null"))
    else:
        print(table.to_string(index=False))
    print(f"battery: {len(names)} scenarios, {len(policies)} policies, {total:.0f} s",
          file=sys.stderr)
    if args.update:
        old = pd.read_csv(RESULTS / "battery.csv")
        keep = old[~(old.policy.isin(policies) & old.scenario.isin(names))]
        table = pd.concat([keep, table], ignore_index=True)
        table["default"] = table.policy == default
        order = {p: i for i, p in enumerate(POLICIES)}
        table = table.sort_values(["scenario", "policy"], key=lambda c: c.map(
            order) if c.name == "policy" else c.map({n: i for i, n in enumerate(specs)}),
            kind="stable").reset_index(drop=True)
        names = list(dict.fromkeys(table.scenario))
    elif args.only or args.policies != ",".join(POLICIES) or \
            args.forecast_model != DEFAULT_MODEL or args.forecast_mode is not None or \
            args.power_limits is not None:
        return
    summary = _summary(table, default)
    cmd = " --quick" if args.quick else f" --update {args.update}" if args.update else ""
    notes = [f"command: `python bench/battery.py{cmd}`, {len(names)} scenarios, {total:.0f} s "
             "wall on the shared 2-core machine (with --update: the re-run's time; the other "
             "rows are from the last full run)",
             f"default policy: {default}; every policy ran with the honest default forecast "
             f"(per scenario in the `forecast` column)",
             "captured = (asap - cost) / (asap - bound); bound = offline's hindsight LP/MILP "
             "(`bound_kind`), which neglects restarts and transfers; a policy that leaves work "
             "undone (`unfinished`, misses, `required_short`) can pay less than the bound: its "
             "captured is not a like-for-like figure",
             "required_short: work due within the horizon (the hindsight bound's share) left "
             "undone, whole jobs; undone_work: all the training work of the jobs that arrived "
             "left undone at the horizon's end, whole jobs (a policy that runs work due after "
             "the horizon pays for it in the week; the bound does only the due share)",
             *summary]
    stem = "battery_quick" if args.quick else "battery"
    write_table(table, stem, "Real-grid battery: every policy, honest forecast", notes)
    if not args.quick:
        plot(table)


def v_sweep(data: Path, tmp: Path, names: Sequence[str], values: Sequence[float]) -> None:
    """``lyapunov`` at each V per scenario, beside the hindsight plan (``offline``): does it
    miss a deadline the hindsight plan meets (``misses_offline_meets``), and is the default
    V within 5 % of the best V's cost among the V with no more misses and no more unfinished
    jobs than the default?"""
    from workbench.policies.lyapunov import DEFAULT_V

    values = sorted(set(values) | {DEFAULT_V})
    built = build(data, tmp, names, tmp)
    rows = []
    for n in names:
        sc = built[n]
        fitted = runner.fit_forecast(sc, forecast_mode(sc))
        off = run_policy(sc, "offline", fitted)[0]
        off_missed = missed_jobs(off.jobs)
        for V in values:
            res, wall, _ = run_policy(sc, "lyapunov", fitted, V=V)
            m = res.metrics
            rows.append({"scenario": n, "V": V, "default": V == DEFAULT_V, "cost": m["cost"],
                         "deadline_misses": int(m["deadline_misses"]),
                         "misses_offline_meets": len(missed_jobs(res.jobs) - off_missed),
                         "offline_misses": len(off_missed),
                         "offline_cost": float(off.metrics["cost"]),
                         "unfinished": int(m["jobs_unfinished"]),
                         "required_short": required_shortfall(sc, res.jobs),
                         "wall_s": wall})
            print(f"  {n:>20} V={V:g}: cost {m['cost']:.3f} misses {m['deadline_misses']} "
                  f"(offline {len(off_missed)}, {rows[-1]['misses_offline_meets']} it meets)",
                  file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    verdict = []
    for n, g in table.groupby("scenario", sort=False):
        d = g[g["default"]].iloc[0]
        ok = g[(g.deadline_misses <= d.deadline_misses) & (g.unfinished <= d.unfinished)]
        best = float(ok.cost.min())
        within = d.cost <= best + 0.05 * abs(best) + 1e-9
        verdict.append(f"{n}: default V={DEFAULT_V:g} cost {d.cost:.3f}, best at no more "
                       f"misses/unfinished {best:.3f}: {'within' if within else 'NOT within'} "
                       f"5 %")
    extra = table[table.misses_offline_meets > 0]
    verdict.append("misses the hindsight plan avoids: "
                   + ("none, at every V on every scenario" if extra.empty else "; ".join(
                       f"{r.scenario} V={r.V:g}: {r.misses_offline_meets}"
                       for r in extra.itertuples())))
    print("\n".join(verdict))
    write_table(table, "battery_v", "lyapunov: a V sweep per battery scenario, beside the "
                "hindsight plan", [f"command: `python bench/battery.py --lyapunov-V "
                                   f"{','.join(f'{v:g}' for v in values)}`", *verdict])


def missed_jobs(jobs: pd.DataFrame) -> set[str]:
    """Ids of the training jobs a run's jobs table marks as missing their deadline (late,
    or unfinished with the deadline inside the horizon): ``deadline_met`` False."""
    tr = jobs[jobs["kind"] == "training"]
    return {str(j) for j, met in zip(tr["job_id"], tr["deadline_met"], strict=True)
            if met is not None and not pd.isna(met) and not bool(met)}


def _summary(table: pd.DataFrame, default: str) -> list[str]:
    out = []
    for pol, g in table.groupby("policy", sort=False):
        c = g["captured"].dropna()
        if c.empty:
            continue
        out.append(f"{pol}: captured median {c.median():.0%}, min {c.min():.0%}; misses "
                   f"{int(g.deadline_misses.sum())} (hindsight replay "
                   f"{int(g.offline_misses.sum())}); round trips {int(g.round_trips.sum())}")
    d = table[table.policy == default]
    others = table[~table.policy.isin([default, "offline"])]
    beaten: list[str] = []
    beaten_due: list[str] = []
    beaten_all: list[str] = []
    for sc_name, g in others.groupby("scenario", sort=False):
        mine = d[d.scenario == sc_name]
        if mine.empty:
            continue
        mc, mm = float(mine.cost.iloc[0]), int(mine.deadline_misses.iloc[0])
        cheaper = g[(g.cost < mc - 1e-9) & (g.deadline_misses <= mm)]
        if cheaper.empty:
            continue
        beaten.append(f"{sc_name} ({', '.join(cheaper.policy)})")
        # "Leaves no more work undone", counted as the work due within the horizon
        # (`required_short`) and as all the work of the jobs that arrived (`undone_work`).
        due = cheaper[cheaper.required_short <= float(mine.required_short.iloc[0]) + 1e-3]
        if not due.empty:
            beaten_due.append(f"{sc_name} ({', '.join(due.policy)})")
        both = due[due.undone_work <= float(mine.undone_work.iloc[0]) + 1e-3]
        if not both.empty:
            beaten_all.append(f"{sc_name} ({', '.join(both.policy)})")
    n = table.scenario.nunique()
    out.append(f"scenarios where some non-hindsight policy beats {default} on cost at no more "
               f"misses: {len(beaten)} of {n}: {'; '.join(beaten)}")
    out.append(f"... and leaves no more due work undone (`required_short`): {len(beaten_due)}"
               f" of {n}: {'; '.join(beaten_due)}")
    out.append(f"... and no more due work nor work in all undone (`required_short`, "
               f"`undone_work`): {len(beaten_all)} of {n}: {'; '.join(beaten_all)}")
    return out


if __name__ == "__main__":
    main()
