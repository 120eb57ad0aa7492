"""``workbench forecast``: backtest the grid forecasts on stored series, and the job-arrival
model on a trace (see :mod:`workbench.forecast`)."""

from __future__ import annotations

import argparse
import json

from workbench.cli._args import iso_time, number, zone_name
from workbench.store import Store


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("forecast", help="backtest price, carbon and job-arrival forecasts",
                       description="Backtest forecasts against what the store holds.")
    fsub = p.add_subparsers(dest="forecast_command", metavar="ACTION", required=True)
    from workbench.forecast.rolling import DEFAULT_MODEL, MODELS

    b = fsub.add_parser(
        "backtest", help="score day-ahead price or carbon forecasts on a stored series",
        description="Issue one forecast every day at 00:00 UTC for the next H hours over "
        "[--start, --end), each from the data before it, and score it against the stored "
        "series: MAE, RMSE, MAPE (where values stay away from zero), the seasonal naive's "
        "MAE, and the 80 %% band's coverage.")
    b.add_argument("--region", required=True, help="grid series name in the store")
    b.add_argument("--kind", required=True, choices=("price", "carbon"))
    b.add_argument("--model", default=DEFAULT_MODEL, choices=MODELS,
                   help=f"forecaster (default {DEFAULT_MODEL}: candidates combined by their "
                   "past errors)")
    b.add_argument("--start", type=iso_time, required=True,
                   help="first origin day (UTC), e.g. 2023-07-01")
    b.add_argument("--end", type=iso_time, required=True, help="day after the last origin (UTC)")
    b.add_argument("--horizon-h", type=number(1, 168, integer=True, unit="hours"), default=24,
                   help="hours ahead (default 24)")
    b.add_argument("--timezone", type=zone_name, default="UTC",
                   help="IANA zone of the market, for local-hour features (default UTC)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.set_defaults(func=_backtest)

    a = fsub.add_parser(
        "arrivals", help="fit and backtest the job-arrival model on a trace",
        description="Every week, fit arrival rate and GPU demand by hour of week per job "
        "class on the weeks before, forecast the next week's hourly arrivals and score them "
        "against the trace and against a flat rate.")
    from workbench.forecast.arrivals import TRACE_FORMATS

    a.add_argument("format", choices=sorted(TRACE_FORMATS))
    a.add_argument("path")
    a.add_argument("--train-weeks", type=number(1, 520, integer=True, unit="weeks"),
                   default=4,
                   help="weeks before each origin to fit on (default 4)")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    a.set_defaults(func=_arrivals)


def _backtest(args: argparse.Namespace) -> int:
    from workbench.forecast.backtest import backtest

    with Store(args.db, read_only=True) as store:
        result = backtest(store, args.region, args.kind, args.start, args.end, args.horizon_h,
                          args.model, args.timezone)
    data = result.to_json()
    if args.json:
        print(json.dumps(data))
        return 0
    mape = "-" if result.mape is None else f"{100 * result.mape:.1f} %"
    print(f"{args.region} {args.kind} ({result.unit}), model {result.model}, "
          f"{result.horizon_h} h ahead, {result.origins} daily origins")
    print(f"  MAE {result.mae:.4g}  RMSE {result.rmse:.4g}  MAPE {mape}  "
          f"seasonal-naive MAE {result.mae_seasonal_naive:.4g} "
          f"(ratio {result.mae / result.mae_seasonal_naive:.3f})  "
          f"80 % band coverage {result.coverage_80:.3f}")
    return 0


def _arrivals(args: argparse.Namespace) -> int:
    from workbench.forecast.arrivals import backtest_arrivals, read_trace

    result = backtest_arrivals(read_trace(args.format, args.path), args.train_weeks)
    data = result.to_json()
    if args.json:
        print(json.dumps(data))
        return 0
    print(f"{args.path}: {data['origins']} weekly origins, each fitted on the "
          f"{data['train_weeks']} weeks before, {data['horizon_h']} h ahead")
    print(f"  hourly arrivals MAE {data['mae_jobs_per_h']:.3f} jobs/h (flat rate "
          f"{data['mae_flat_jobs_per_h']:.3f}); GPUs requested MAE "
          f"{data['mae_gpus_per_h']:.3f} GPUs/h (flat {data['mae_flat_gpus_per_h']:.3f}); "
          f"forecast/actual arrivals {data['total_jobs_ratio']:.3f}")
    return 0
