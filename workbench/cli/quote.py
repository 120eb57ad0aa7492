"""``workbench quote``: where, on what and when to run a new job (see :mod:`workbench.quote`)."""

from __future__ import annotations

import argparse
import json
import sys

from workbench.cli._args import add_forecast_args, forecast_error, iso_time, number
from workbench.cli.scenario import load_or_build
from workbench.model import as_utc
from workbench.quote import JobSpec, QuoteError, quote


def _gpu_range(text: str) -> tuple[int, int]:
    try:
        lo, _, hi = text.partition("-")
        a, b = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus takes N or MIN-MAX, got {text!r}") from None
    return a, b


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quote",
        help="recommend a datacenter, configuration and start for a new job",
        description="Price every datacenter, GPU type and GPU count for a new job against the "
        "scenario's price and carbon, and recommend the cheapest start that meets the deadline.",
    )
    p.add_argument("scenario", help="scenario name (from the store, or built-in)")
    p.add_argument("--app", required=True, help="application profile, e.g. cifar10")
    p.add_argument("--work", type=number(0, low_open=True, unit="samples"),
                   required=True, help="total work, effective samples")
    p.add_argument("--home", required=True, help="datacenter where the job's data lives")
    p.add_argument("--gpus", type=_gpu_range, default=(1, 8), metavar="MIN-MAX",
                   help="GPU-count range (default 1-8)")
    p.add_argument("--deadline-h", type=number(0, 87840, low_open=True, unit="hours"), default=None,
                   help="hours after arrival by which it must finish (default: horizon end)")
    p.add_argument("--arrival", type=iso_time, default=None,
                   help="ISO time the job can start (UTC)")
    p.add_argument("--gpu-type", action="append", default=[], dest="gpu_types",
                   help="allowed GPU type (repeat; default any)")
    p.add_argument("--checkpoint-gb", type=number(0, 1e6, unit="GB"), default=1.0,
                   help="data moved when run away from home, GB (default 1)")
    p.add_argument("--carbon-price", type=number(0, 1e6), default=0.0,
                   help="currency per kg CO2 added to the cost when ranking (default 0)")
    p.add_argument("--top", type=number(1, integer=True),
                   default=5, help="options to print (default 5)")
    add_forecast_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_quote)


def _quote(args: argparse.Namespace) -> int:
    scenario = load_or_build(args.db, args.scenario)
    try:
        spec = JobSpec(
            app=args.app, work_samples=args.work, home=args.home, min_gpus=args.gpus[0],
            max_gpus=args.gpus[1], deadline_h=args.deadline_h,
            arrival=as_utc(args.arrival) if args.arrival else None,
            gpu_types=tuple(args.gpu_types), checkpoint_gb=args.checkpoint_gb,
        )
        result = quote(scenario, spec, carbon_price_per_kg=args.carbon_price,
                       forecast_mode=args.forecast, forecast_error=forecast_error(args))
    except QuoteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    data = result.to_dict()
    data["options"] = data["options"][: max(args.top, 1)]
    # Exit 1 when no option meets the deadline: scripts can tell "no" from "yes".
    status = 0 if data["recommended"] is not None else 1
    if args.json:
        print(json.dumps(data))
        return status
    best = data["recommended"]
    cur = data["currency"]
    print(f"priced against the {data['forecast']} forecast of price and carbon"
          + (" (a what-if: the future as it happened)" if data["forecast"] == "perfect" else ""))
    if best is None:
        print("no option finishes before the deadline")
    else:
        print(f"recommended: {best['datacenter']} {best['n_gpus']}x{best['gpu_type']} "
              f"(batch {best['batch_size']}), start {best['start']}, finish {best['finish']}")
        if best["profile"] == "predicted":
            print(f"  run time predicted from the job's graph: {best['duration_h']:.1f} h, "
                  f"90% interval {best['duration_lo_h']:.1f}-{best['duration_hi_h']:.1f} h")
        print(f"  energy {best['energy_kwh']:.2f} kWh, cost {best['cost']:.2f} {cur}, "
              f"carbon {best['carbon_kg']:.2f} kg (start now: {best['cost_if_now']:.2f} {cur})")
    print(f"{'datacenter':<12}{'config':<16}{'start':<27}{'hours':>7}{'h 90% int.':>13}"
          f"{'kWh':>9}{'cost':>10}{'kg CO2':>9}")
    for r in data["options"]:
        config = f"{r['n_gpus']}x{r['gpu_type']}"
        start = r["start"] or "-"
        cost = f"{r['cost']:.2f}" if r["cost"] is not None else "-"
        kg = f"{r['carbon_kg']:.2f}" if r["carbon_kg"] is not None else "-"
        iv = (f"{r['duration_lo_h']:.1f}-{r['duration_hi_h']:.1f}"
              if r["profile"] == "predicted" else r["profile"])
        print(f"{r['datacenter']:<12}{config:<16}{start:<27}{r['duration_h']:>7.1f}{iv:>13}"
              f"{r['energy_kwh']:>9.2f}{cost:>10}{kg:>9}  {r['note']}")
    for w in data["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    return status
