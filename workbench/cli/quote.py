"""``workbench quote``: where, on what and when to run a new job (see :mod:`workbench.quote`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any

import pandas as pd

from workbench.cli._args import (
    add_forecast_args,
    fail,
    forecast_error,
    iso_time,
    number,
    parse_power_limits,
)
from workbench.cli.scenario import read_scenario
from workbench.model import as_utc
from workbench.quote import QUOTE_ORDERS, JobSpec, QuoteError, quote, sort_quote


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
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--app", help="application profile, e.g. cifar10")
    src.add_argument("--model-config", default=None,
                     help="an LLM job by its Hugging Face config.json: its profiles are "
                     "predicted on the scenario's GPU types (with --seq-len, --global-batch, "
                     "--tokens, --precision)")
    p.add_argument("--work", type=number(0, low_open=True, unit="samples"), default=None,
                   help="--app: total work, effective samples")
    p.add_argument("--seq-len", type=number(1, 10**6, integer=True, unit="tokens"),
                   default=None, help="--model-config: tokens per sequence")
    p.add_argument("--global-batch", type=number(1, 10**7, integer=True, unit="sequences"),
                   default=None, help="--model-config: sequences per step")
    p.add_argument("--tokens", type=number(0, 1e16, low_open=True, unit="tokens"),
                   default=None, help="--model-config: tokens to train on")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="bf16",
                   help="--model-config: arithmetic (default bf16)")
    p.add_argument("--purpose", choices=("pretrain", "finetune"), default="pretrain",
                   help="--model-config: pre-training or fine-tuning (default pretrain)")
    p.add_argument("--home", required=True, help="datacenter where the job's data lives")
    p.add_argument("--gpus", type=_gpu_range, default=(1, 8), metavar="MIN-MAX",
                   help="GPU-count range (default 1-8)")
    p.add_argument("--deadline-h", type=number(0, 87840, low_open=True, unit="hours"), default=None,
                   help="hours after arrival by which it must finish (default: horizon end)")
    p.add_argument("--arrival", type=iso_time, default=None,
                   help="ISO time the job can start (UTC)")
    p.add_argument("--gpu-type", action="append", default=[], dest="gpu_types",
                   help="allowed GPU type (repeat; default any)")
    p.add_argument("--checkpoint-gb", type=number(0, 1e6, unit="GB"), default=None,
                   help="checkpoint moved when the job moves, GB (default 1; --model-config: "
                   "FP32 weights and Adam states, 12 B per parameter)")
    p.add_argument("--dataset-gb", type=number(0, 1e6, unit="GB"), default=None,
                   help="data moved on the first run away from home, GB (default: the "
                   "checkpoint's size; --model-config: the tokens at 2 B each (4 above a "
                   "65,536-token vocabulary), plus the weights of a fine-tune)")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="--model-config: recompute each block in the backward pass (less "
                   "memory, a longer step)")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                   help="--model-config: ZeRO/FSDP stage sharding optimizer states (1), "
                   "gradients (2) and weights (3) over a node's replicas; the job then takes "
                   "whole nodes (default 0)")
    p.add_argument("--carbon-price", type=number(0, 1e6), default=0.0,
                   help="currency per kg CO2 added to the cost when ranking (default 0)")
    p.add_argument("--order", choices=list(QUOTE_ORDERS), default="cheapest",
                   help="what 'best' means: fastest (earliest finish), cheapest (lowest cost, "
                   "with --carbon-price) or cleanest (least carbon) before the deadline; late "
                   "options follow by run time, cost or carbon if started now "
                   "(default cheapest)")
    p.add_argument("--top", type=number(1, integer=True),
                   default=5, help="options to print (default 5)")
    add_forecast_args(p)
    p.add_argument("--power-limits", default=None, metavar="FRACTIONS",
                   help="also quote each option at these GPU power limits, fractions of the "
                   "GPU's maximum board power in [0.4, 1] (e.g. 0.85,0.7; 'default' for "
                   "1,0.9,0.8,0.7,0.6,0.5): the time-energy trade-off")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_quote)


def _quote(args: argparse.Namespace) -> int:
    scenario = read_scenario(args.db, args.scenario)
    app, work = args.app, args.work
    llm = None
    ckpt, data_gb = args.checkpoint_gb, args.dataset_gb
    if args.model_config is not None:
        from workbench.llm_jobs import llm_quote_inputs

        try:
            llm = llm_quote_inputs(
                scenario, args.model_config, args.seq_len, args.global_batch, args.tokens,
                args.precision, args.purpose, tuple(args.gpu_types),
                args.activation_checkpointing, args.zero)
        except ValueError as exc:
            return fail(exc)
        scenario, app, work = llm.scenario, llm.app, llm.work_samples
        ckpt = llm.checkpoint_gb if ckpt is None else ckpt
        data_gb = llm.dataset_gb if data_gb is None else data_gb
    elif work is None:
        return fail("--app needs --work (total effective samples)")
    ckpt = 1.0 if ckpt is None else ckpt
    try:
        spec = JobSpec(
            app=app, work_samples=work, home=args.home, min_gpus=args.gpus[0],
            max_gpus=args.gpus[1], deadline_h=args.deadline_h,
            arrival=as_utc(args.arrival) if args.arrival else None,
            gpu_types=tuple(args.gpu_types), checkpoint_gb=ckpt, dataset_gb=data_gb,
        )
        menu = parse_power_limits(args.power_limits)
        result = quote(scenario, spec, carbon_price_per_kg=args.carbon_price,
                       forecast_mode=args.forecast, forecast_error=forecast_error(args),
                       forecast_model=args.forecast_model,
                       power_limits=menu)
    except (QuoteError, ValueError) as exc:
        return fail(exc)
    options = sort_quote(result.options, args.order)
    if llm is not None:
        from workbench.llm_jobs import llm_quote_columns

        options = llm_quote_columns(options, llm)
    result = dataclasses.replace(result, options=options)
    data = result.to_dict()
    data["order"] = args.order
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
        print(f"no option finishes before the deadline; the late ones, {_LATE[args.order]} "
              "first:")
    else:
        print(f"recommended ({QUOTE_ORDERS[args.order][1]} before the deadline): "
              f"{best['datacenter']} {best['n_gpus']}x{best['gpu_type']} "
              f"(batch {best['batch_size']}), start {_minute(best['start'])}, finish "
              f"{_minute(best['finish'])}")
        if best.get("mfu") is not None:
            print(f"  step {_n(best['step_time_s'])} s at batch {best['batch_size']}, model "
                  f"FLOPs utilisation {100 * best['mfu']:.0f}%; moves "
                  f"{_n(data['spec']['dataset_gb'])} GB of data, checkpoints "
                  f"{_n(data['spec']['checkpoint_gb'])} GB")
        if best["profile"] == "predicted":
            print(f"  run time predicted from the job's graph: {_n(best['duration_h'])} h, "
                  f"90% interval {_n(best['duration_lo_h'])}-{_n(best['duration_hi_h'])} h")
        print(f"  energy {_n(best['energy_kwh'])} kWh, cost {_n(best['cost'])} {cur}, "
              f"carbon {_n(best['carbon_kg'])} kg (start now: {_n(best['cost_if_now'])} "
              f"{cur})")
    late = any(not r["feasible"] for r in data["options"])
    print("  ".join(f"{h:{a}{w}}" for h, a, w in _COLUMNS).rstrip())
    for r in data["options"]:
        ok = r["feasible"]
        iv = (f"{_n(r['duration_lo_h'])}-{_n(r['duration_hi_h'])}"
              if r["profile"] == "predicted" else r["profile"])
        limited = menu and r["power_limit_w"] is not None
        cells = [r["datacenter"], f"{r['n_gpus']}x{r['gpu_type']}"
                 + (f"@{r['power_limit_w']:.0f}W" if limited else ""),
                 _minute(r["start"]) if ok else "late", _n(r["duration_h"]), iv,
                 _n(r["energy_kwh"]),
                 _n(r["cost"]) if ok else _n(r["cost_if_now"], "*"),
                 _n(r["carbon_kg"]) if ok else _n(r["carbon_kg_if_now"], "*"), r["note"]]
        print("  ".join(f"{c:{a}{w}}" for c, (_, a, w) in zip(cells, _COLUMNS, strict=True))
              .rstrip())
    if late:
        print(f"(late: misses the deadline; * cost and carbon if started now, {cur} and kg; "
              "- does not finish in the horizon)")
    for w in data["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    return status


_LATE = {"fastest": "shortest run", "cheapest": "cheapest to start now",
         "cleanest": "least carbon if started now"}
"""How :func:`workbench.quote.sort_quote` orders late options, in words."""

_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("datacenter", "<", 11), ("config", "<", 19), ("start (UTC)", "<", 16),
    ("hours", ">", 8), ("h 90% int.", ">", 13), ("kWh", ">", 9), ("cost", ">", 10),
    ("kg CO2", ">", 9), ("note", "<", 0),
)
"""The text table: header, alignment, width; columns are two spaces apart (a wider value
pushes the rest right, never into its neighbour)."""


def _n(value: Any, mark: str = "") -> str:
    """A number in at most ~8 characters: 2 decimals below 10, 1 below 1,000, none below
    a million, else 3 significant digits (``1.13e+07``); ``-`` for none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    v = float(value)
    text = (f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 1000
            else f"{v:,.0f}" if abs(v) < 1e6 else f"{v:.3g}")
    return text + mark


def _minute(iso: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM`` UTC (to the minute); ``-`` for none."""
    if not iso:
        return "-"
    return f"{pd.Timestamp(iso).tz_convert('UTC'):%Y-%m-%d %H:%M}"
