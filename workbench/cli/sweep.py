"""``workbench sweep``: a grid of runs (policies x V x carbon caps x seeds) on Dask.

Example::

    workbench sweep --scenario seed3 --policy lyapunov --V 1,3,10,30,100 \\
        --carbon-cap none,20% --seeds 3 --noise 0.1 --out sweep.csv

Runs go to a local cluster of ``--workers`` processes unless ``--scheduler tcp://HOST:PORT``
names a running one. Every run lands in the store's run tables; the table (one row per run)
goes to ``--out`` and a short summary (mean over seeds) to stdout.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from workbench.caps import Caps
from workbench.cli import progress_wanted, quiet_loggers
from workbench.cli._args import (
    add_cluster_args,
    add_forecast_args,
    fail,
    forecast_settings,
    number,
)
from workbench.cli._outputs import check_outputs
from workbench.cli.scenario import load_or_build
from workbench.policies import POLICY_NAMES
from workbench.policies.lyapunov import V_MAX
from workbench.runner import SimSettings
from workbench.sweep import SweepError, run_sweep, sweep_points

SUMMARY_COLUMNS: tuple[str, ...] = (
    "cost", "carbon_kg", "energy_kwh", "deadline_misses", "mean_jct_h", "migrations",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a grid of policies and knobs over seeds on Dask distributed",
        description="Run every combination of policy, V, carbon cap and seed on a Dask "
        "cluster; store each run and write one CSV row per run.",
    )
    p.add_argument("--scenario", default="seed3", help="scenario name (default: seed3)")
    p.add_argument("--policy", default="lyapunov",
                   help=f"comma-separated policies, from: {', '.join(POLICY_NAMES)}")
    p.add_argument("--V", default="", help="comma-separated V values for lyapunov, e.g. "
                   "1,3,10,30,100 (default: the policy's own)")
    p.add_argument("--carbon-cap", default="", metavar="CAPS",
                   help="comma-separated caps: none, kg (1200) or percent below asap-home "
                   "(20%%); asap-home is added to the grid when a percentage is given")
    p.add_argument("--seeds", type=number(1, 10000, integer=True),
                   default=1, help="number of seeds, 0..N-1 (default 1)")
    p.add_argument("--noise", type=number(0, 10), default=None,
                   help="log-normal sigma of throughput errors (default 0.1 with several "
                   "seeds, else 0)")
    add_forecast_args(p)
    add_cluster_args(p)
    p.add_argument("--out", type=Path, default=Path("sweep.csv"),
                   help="CSV of one row per run (default: sweep.csv)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def _floats(text: str, what: str) -> list[float]:
    out = []
    for part in filter(None, (s.strip() for s in text.split(","))):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{what}: {part!r} is not a number; use e.g. 1,3,10") from None
        if not (math.isfinite(value) and 0 < value <= V_MAX):
            raise ValueError(f"{what}: {part} is not a number > 0 and <= {V_MAX:g}")
        out.append(value)
    return out


def _carbon_cap(text: str) -> Caps:
    try:
        return Caps.parse_carbon(text)
    except ValueError as exc:
        raise ValueError(f"--carbon-cap {text.strip()!r}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    try:
        policies = [s.strip() for s in args.policy.split(",") if s.strip()]
        unknown = sorted(set(policies) - set(POLICY_NAMES))
        if unknown:
            raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICY_NAMES)}")
        V = _floats(args.V, "--V")
        caps = [_carbon_cap(s) for s in args.carbon_cap.split(",") if s.strip()]
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        if args.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {args.workers}")
        points = sweep_points(policies, V=V, carbon_caps=caps, seeds=range(args.seeds))
        for flag, value in (("--noise", args.noise), ("--forecast-error", args.forecast_error)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{flag} must be a number >= 0, got {value}")
        bad_output = check_outputs([("--out", args.out)], args.db)
        if bad_output:
            raise ValueError(bad_output)
    except ValueError as exc:
        return fail(exc)
    noise = args.noise if args.noise is not None else (0.1 if args.seeds > 1 else 0.0)
    forecast = forecast_settings(args)
    sim = SimSettings(noise=noise)
    scenario = load_or_build(args.db, args.scenario)
    import distributed  # noqa: F401 - its import sets its loggers to INFO: quiet them again

    quiet_loggers(args.verbose)
    try:
        table = run_sweep(scenario, points, db=args.db, csv_path=args.out,
                          scheduler_address=args.scheduler, n_workers=args.workers,
                          processes=not args.threads, forecast=forecast, sim=sim,
                          progress=progress_wanted(args))
    except SweepError as exc:
        return fail(exc)
    warn_once(table, args.db)
    bad = table[table["status"].isin(["error", "skipped"])]
    for _, row in bad.iterrows():
        print(f"warning: {row['policy']} V={row['V']} cap={row['carbon_cap']} "
              f"seed={row['seed']}: {row['status']}: {row['message']}", file=sys.stderr)
    if args.json:
        print(table.to_json(orient="records"))
        return 0 if bad.empty else 1
    print(_summary(table).to_string(index=False))
    print(f"{len(table)} runs ({len(bad)} failed) stored in {args.db}; table in {args.out}")
    return 0 if bad.empty else 1


def warn_once(table: pd.DataFrame, db: str, limit: int = 10) -> None:
    """Print the warnings of a grid's runs to stderr, each text once with how many runs
    gave it (a frontier's caps share most of them); the whole of each is stored with its
    run (``workbench runs show RUN``)."""
    from workbench.cli.plan import short_warning
    from workbench.store import Store

    ids = [str(r) for r in table.loc[table["status"] == "warnings", "run_id"].dropna()]
    if not ids or db == ":memory:":
        return
    said: dict[str, list[str]] = {}
    with Store(db, read_only=True) as store:
        for rid in ids:
            for msg in str(store.run_info(rid).get("log") or "").splitlines():
                if msg.strip():
                    said.setdefault(msg, []).append(rid)
    for msg, rids in list(said.items())[:limit]:
        who = f"run {rids[0]}" if len(rids) == 1 else f"{len(rids)} runs, e.g. {rids[0]}"
        print(f"warning ({who}): {short_warning(msg, f'`workbench runs show {rids[0]}`')}",
              file=sys.stderr)
    if len(said) > limit:
        print(f"warning: ... and {len(said) - limit} more (`workbench runs show RUN`)",
              file=sys.stderr)


def _summary(table: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds of the headline metrics, one row per policy, V and cap."""
    ok = table[table["status"].isin(["ok", "warnings"])].copy()
    cols = [c for c in SUMMARY_COLUMNS if c in ok]
    if ok.empty:
        return pd.DataFrame(columns=["policy", "V", "carbon_cap", "runs", *cols])
    ok["V"] = ok["V"].astype(object).where(ok["V"].notna(), "-")
    grouped = ok.groupby(["policy", "V", "carbon_cap"], sort=False, dropna=False)
    out = grouped[cols].mean().round(2)
    for col in ("deadline_misses", "migrations"):
        # Counts stay integers where every seed gave the same count (a mean of 0.5 stays).
        if col in out and (out[col].dropna() % 1 == 0).all():
            out[col] = out[col].astype("Int64")
    out.insert(0, "runs", grouped.size())
    return out.reset_index()


__all__ = ["register", "run"]

