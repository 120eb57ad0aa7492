"""Day-ahead forecast backtests over every grid zone in the shared data.

Usage: ``python bench/forecast.py [--data ../shared/data] [--db PATH] [--horizon-h 24]
[--models auto,lear,auto-lear]``.

Imports into a scratch store the six SustainCluster 2023 zones (price and carbon) and the
Electricity Maps 2022 hourly carbon of ES, NO and BR, then backtests the default model
(``auto``: candidates combined by their own past errors) with one forecast every day at
00:00 UTC over a summer (Jul-Sep) and a winter (Oct-Dec) quarter, scored against the stored
series. Prints and writes ``docs/results/forecast.{csv,md}`` (one row per zone, kind and
quarter, with the MAE ratio to the daily seasonal naive), ``docs/results/forecast.png``
(forecast band vs truth for a sample week) and the time of one full-year backtest of a zone
(price and carbon) against the time of the same quarter, measured in this process.

With ``--models`` naming more than ``auto`` (any of ``workbench.forecast.MODELS``), each
model is backtested on the same zone-quarters instead, and ``docs/results/forecast-models.
{csv,md}`` hold, per zone-quarter and model, the MAE ratio to the seasonal naive and the
CPU seconds per forecast (process time of the backtest over its origins, the warm-up
origins' fits included) as a ratio to ``auto``'s on the same zone-quarter; the notes give
each model's median ratio per kind (median over zones of each zone's two quarters, as
above) and its median CPU ratio.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from common import RESULTS, write_table

from workbench.forecast import CANDIDATES, DEFAULT_MODEL, MODELS, BacktestResult, backtest
from workbench.io.grid import import_grid
from workbench.store import Store

ROOT = Path(__file__).resolve().parent.parent
SUSTAIN = {"US-CAL-CISO": "America/Los_Angeles", "US-TEX-ERCO": "America/Chicago",
           "US-MIDA-PJM": "America/New_York", "DE-LU": "Europe/Berlin",
           "JP-TK": "Asia/Tokyo", "SG": "Asia/Singapore"}
EMAPS = {"ES": "Europe/Madrid", "NO": "Europe/Oslo", "BR": "America/Sao_Paulo"}
SHORT = {"seasonal-naive": "naive", "seasonal-naive-weekly": "weekly"}
"""The weight columns' names (``w_naive``, ``w_weekly``, ``w_harmonic``, ``w_gbm``, ``w_lear``)."""


def build(data: Path, store: Store) -> list[tuple[str, str, int]]:
    """Import every zone; returns (zone, kind, year) to backtest."""
    todo = []
    sc = data / "grid" / "sustain-cluster"
    for z in SUSTAIN:
        import_grid(store, "electricitymaps-csv", sc / "carbon" / z / f"{z}_2023_hourly.csv", z)
        import_grid(store, "price-csv", sc / "prices" / z / f"{z}_electricity_prices_2023.csv",
                    z)
        todo += [(z, "price", 2023), (z, "carbon", 2023)]
    for z in EMAPS:
        import_grid(store, "electricitymaps-csv",
                    data / "grid" / "electricitymaps" / f"{z}_2022_hourly.csv", z)
        todo.append((z, "carbon", 2022))
    return todo


def quarters(year: int) -> dict[str, tuple[str, str]]:
    return {"summer (Jul-Sep)": (f"{year}-07-01", f"{year}-10-01"),
            "winter (Oct-Dec)": (f"{year}-10-01", f"{year}-12-31")}


def sample_week_plot(results: dict[tuple[str, str], BacktestResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(11, 3.2 * len(results)))
    for ax, ((zone, kind), r) in zip(np.atleast_1d(axes), results.items(), strict=True):
        fc = r.forecast
        days = slice(0, 7)
        t = np.concatenate([pd.date_range(o, periods=r.horizon_h, freq="h")
                            for o in fc.origins[days]])
        ax.fill_between(t, fc.q10[days].ravel(), fc.q90[days].ravel(), alpha=0.3,
                        color="tab:blue", label="model 10-90 % band")
        ax.plot(t, fc.q50[days].ravel(), color="tab:blue", label="model median (auto)")
        ax.plot(t, fc.seasonal_naive[days].ravel(), color="tab:gray", ls=":",
                label="seasonal naive (yesterday)")
        ax.plot(t, r.truth[days].ravel(), color="k", lw=1, label="truth")
        ax.set_ylabel(f"{kind} ({r.unit})")
        ax.set_title(f"{zone} {kind}: day-ahead forecasts issued 00:00 UTC, first week")
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--db", type=Path, default=None, help="scratch store (default: temp file)")
    ap.add_argument("--horizon-h", type=int, default=24)
    ap.add_argument("--zones", nargs="*", default=None, help="only these zones")
    ap.add_argument("--models", default=DEFAULT_MODEL,
                    help=f"comma-separated models to compare (of {', '.join(MODELS)})")
    args = ap.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        sys.exit(f"unknown models {unknown}; use some of {', '.join(MODELS)}")
    if models != [DEFAULT_MODEL]:
        compare(args, models)
        return
    logging.basicConfig(level=logging.WARNING)
    if not args.data.is_dir():
        sys.exit(f"no shared data at {args.data}; pass --data")
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "forecast.duckdb"
        with Store(db) as store:
            todo = _series(args, store)
            rows, samples = [], {}
            for zone, kind, year in todo:
                tz = SUSTAIN.get(zone) or EMAPS[zone]
                for label, (start, end) in quarters(year).items():
                    t0 = time.perf_counter()
                    r = backtest(store, zone, kind, start, end, args.horizon_h, timezone=tz)
                    wall = time.perf_counter() - t0
                    w = r.forecast.weights.mean(axis=0)
                    rows.append({
                        "zone": zone, "kind": kind, "quarter": f"{year} {label}",
                        "unit": r.unit, "mae": r.mae, "mae_seasonal_naive": r.mae_seasonal_naive,
                        "mae_ratio": r.mae / r.mae_seasonal_naive, "rmse": r.rmse,
                        "mape": np.nan if r.mape is None else r.mape,
                        "coverage_80": r.coverage_80, "origins": r.origins,
                        **{f"w_{SHORT.get(c, c)}": wc
                           for c, wc in zip(CANDIDATES, w, strict=True)},
                        "wall_s": wall,
                    })
                    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in rows[-1].items()), flush=True)
                    if zone == "DE-LU" and label.startswith("summer"):
                        samples[(zone, kind)] = r
            table = pd.DataFrame(rows)
            # A full year (from the 29th day, when 28 days of history exist) against the
            # summer quarter of the same zone, both kinds, in this process.
            zone = "DE-LU" if "DE-LU" in table.zone.values else table.zone.iloc[0]
            kinds = sorted(table.loc[table.zone == zone, "kind"].unique())
            t0, c0 = time.perf_counter(), time.process_time()
            for kind in kinds:
                backtest(store, zone, kind, "2023-01-29", "2023-12-31", args.horizon_h,
                         timezone=SUSTAIN.get(zone, "UTC"))
            year_s, year_cpu_s = time.perf_counter() - t0, time.process_time() - c0
            quarter_s = float(table.loc[(table.zone == zone)
                                        & table.quarter.str.contains("summer"), "wall_s"].sum())
    notes = []
    for kind in ("price", "carbon"):
        sub = table[table.kind == kind]
        per_zone = sub.groupby("zone").mae_ratio.median()
        notes.append(
            f"{kind}: median MAE ratio to seasonal naive over zones (median of each zone's two "
            f"quarters) {per_zone.median():.3f} (target <= 0.85); worst zone-quarter "
            f"{sub.mae_ratio.max():.3f} ({sub.loc[sub.mae_ratio.idxmax(), 'zone']}, "
            f"{sub.loc[sub.mae_ratio.idxmax(), 'quarter']}; target <= 1.05); 80 % coverage "
            f"{sub.coverage_80.min():.3f} .. {sub.coverage_80.max():.3f} (target 0.75 .. 0.85)")
    notes.append(f"one full year (2023-01-29 .. 2023-12-30, {len(kinds)} kinds) of {zone}: "
                 f"{year_s:.1f} s wall, {year_cpu_s:.1f} s CPU; its summer quarter: "
                 f"{quarter_s:.1f} s wall; ratio {year_s / quarter_s:.2f} (target: year <= 30 s "
                 "on the 2-core machine; wall time depends on what else shares it)")
    notes.append("horizon: next 24 h from each 00:00 UTC origin; MAE in the series' unit; MAPE "
                 "(a fraction) only where every true value stays >= 10 % of the mean |value|")
    notes.append("w_*: mean weight of each candidate in the auto combination over the origins "
                 "(w_lear 0: LEAR is a member of auto-lear, not of auto)")
    for n in notes:
        print(n)
    write_table(table, "forecast", "Day-ahead forecast backtests (default model vs seasonal "
                "naive)", notes)
    if samples:
        sample_week_plot(samples, RESULTS / "forecast.png")


def _series(args: argparse.Namespace, store: Store) -> list[tuple[str, str, int]]:
    """The (zone, kind, year) series imported into ``store``, only ``--zones`` if given."""
    todo = build(args.data, store)
    return [t for t in todo if t[0] in args.zones] if args.zones else todo


def compare(args: argparse.Namespace, models: list[str]) -> None:
    """Backtest each of ``models`` on every zone-quarter; MAE ratio and CPU per forecast."""
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "forecast.duckdb"
        with Store(db) as store:
            todo = _series(args, store)
            rows = []
            for zone, kind, year in todo:
                tz = SUSTAIN.get(zone) or EMAPS[zone]
                for label, (start, end) in quarters(year).items():
                    line = [f"{zone} {kind} {year} {label}:"]
                    for model in models:
                        c0 = time.process_time()
                        r = backtest(store, zone, kind, start, end, args.horizon_h,
                                     model=model, timezone=tz)
                        cpu = time.process_time() - c0
                        rows.append({"zone": zone, "kind": kind, "quarter": f"{year} {label}",
                                     "model": model, "mae": r.mae,
                                     "mae_seasonal_naive": r.mae_seasonal_naive,
                                     "mae_ratio": r.mae / r.mae_seasonal_naive,
                                     "coverage_80": r.coverage_80, "origins": r.origins,
                                     "cpu_s_per_forecast": cpu / r.origins})
                        line.append(f"{model} {rows[-1]['mae_ratio']:.3f} "
                                    f"({rows[-1]['cpu_s_per_forecast']:.3f} s)")
                    print(" ".join(line), flush=True)
    table = pd.DataFrame(rows)
    if DEFAULT_MODEL in models:
        base = table[table.model == DEFAULT_MODEL].set_index(["zone", "kind", "quarter"])
        key = pd.MultiIndex.from_frame(table[["zone", "kind", "quarter"]])
        table["cpu_ratio_to_auto"] = (table.cpu_s_per_forecast.to_numpy()
                                      / base.cpu_s_per_forecast.reindex(key).to_numpy())
    notes = []
    for model in models:
        sub = table[table.model == model]
        parts = []
        for kind in ("price", "carbon"):
            k = sub[sub.kind == kind]
            if not k.empty:
                med = float(k.groupby("zone").mae_ratio.median().median())
                parts.append(f"{kind} median MAE ratio {med:.3f} "
                             f"(worst {k.mae_ratio.max():.3f})")
        cpu = f"CPU {sub.cpu_s_per_forecast.median():.3f} s per forecast"
        if "cpu_ratio_to_auto" in sub:
            cpu += f", {sub.cpu_ratio_to_auto.median():.2f}x auto's (median)"
        notes.append(f"{model}: " + "; ".join(parts) + f"; {cpu}")
    notes.append("MAE ratio: the model's MAE over the daily seasonal naive's at the same "
                 "origins (next 24 h from each 00:00 UTC); per-kind medians over zones of each "
                 "zone's two quarters")
    for n in notes:
        print(n)
    write_table(table, "forecast-models", "Day-ahead forecast backtests per model", notes)


if __name__ == "__main__":
    main()
