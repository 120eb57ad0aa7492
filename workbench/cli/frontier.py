"""``workbench frontier``: the cost-carbon frontier of a policy, on Dask like the sweep.

Example::

    workbench frontier --scenario seed3 --caps 0%,5%,10%,20% --out frontier.csv

Runs the policy (default: the product's default) uncapped and at each carbon cap, with the
hindsight plan at the same caps beside it (its LP bound is the frontier no plan can beat),
through :func:`workbench.sweep.run_sweep` (one run spec per point, every run stored). A cap
is kg CO2 over the horizon (``1200``) or a percentage below the ``asap-home`` run (``20%``,
as ``plan --carbon-cap`` takes it). Prints one row per cap
(:data:`workbench.sweep.FRONTIER_COLUMNS`) and writes it to ``--out``; with ``--json`` the
rows alone on stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.caps import Caps
from workbench.cli import progress_wanted, quiet_loggers
from workbench.cli._args import add_cluster_args, add_forecast_args, fail, forecast_settings
from workbench.cli._outputs import check_outputs
from workbench.cli.scenario import load_or_build
from workbench.cli.sweep import warn_once
from workbench.io.plan_csv import write_csv
from workbench.policies import DEFAULT_POLICY, POLICY_NAMES
from workbench.runner import RunSpec, least_carbon
from workbench.sweep import SweepError, frontier_points, frontier_table, run_sweep


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "frontier",
        help="cost against carbon of a policy at several carbon caps, beside the hindsight "
        "bound",
        description="Run a policy uncapped and at each carbon cap (and the hindsight plan at "
        "the same caps) on a Dask cluster; print and write one row per cap.",
    )
    p.add_argument("--scenario", default="seed3", help="scenario name (default: seed3)")
    p.add_argument("--policy", default=DEFAULT_POLICY,
                   help=f"the policy (default: {DEFAULT_POLICY}), from: "
                   f"{', '.join(POLICY_NAMES)}")
    p.add_argument("--caps", default="0%,5%,10%,20%", metavar="CAPS",
                   help="comma-separated carbon caps: kg (1200) or percent below asap-home "
                   "(20%%); default 0%%,5%%,10%%,20%%")
    add_forecast_args(p)
    add_cluster_args(p)
    p.add_argument("--out", type=Path, default=Path("frontier.csv"),
                   help="CSV of one row per cap (default: frontier.csv)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def _caps(text: str) -> list[Caps]:
    out = []
    for part in filter(None, (s.strip() for s in text.split(","))):
        if part.lower() == "none":
            continue  # the uncapped run is always on the frontier
        try:
            out.append(Caps.parse_carbon(part))
        except ValueError as exc:
            raise ValueError(f"--caps {part!r}: {exc}") from None
    return out


def run(args: argparse.Namespace) -> int:
    try:
        if args.policy not in POLICY_NAMES:
            raise ValueError(f"unknown policy {args.policy!r}; choose from "
                             f"{', '.join(POLICY_NAMES)}")
        points = frontier_points(args.policy, _caps(args.caps))
        if args.forecast_error is not None and not args.forecast_error >= 0:
            raise ValueError(f"--forecast-error must be a number >= 0, got "
                             f"{args.forecast_error}")
        bad_output = check_outputs([("--out", args.out)], args.db)
        if bad_output:
            raise ValueError(bad_output)
    except ValueError as exc:
        return fail(exc)
    scenario = load_or_build(args.db, args.scenario)
    import distributed  # noqa: F401 - its import sets its loggers to INFO: quiet them again

    quiet_loggers(args.verbose)
    try:
        table = run_sweep(scenario, points, db=args.db, scheduler_address=args.scheduler,
                          n_workers=args.workers, processes=not args.threads,
                          forecast=forecast_settings(args),
                          progress=progress_wanted(args))
    except SweepError as exc:
        return fail(exc)
    # The least carbon with every deadline met does not depend on the budget: one LP.
    least = least_carbon(RunSpec(scenario.name, args.policy), scenario, Caps(carbon_kg=1.0))
    front = frontier_table(table, args.policy, None if least is None else least.carbon_kg)
    write_csv(front, args.out)
    warn_once(table, args.db)
    bad = table[table["status"].isin(["error", "skipped"])]
    for _, row in bad.iterrows():
        print(f"warning: {row['policy']} cap={row['carbon_cap']}: {row['status']}: "
              f"{row['message']}", file=sys.stderr)
    if args.json:
        print(front.to_json(orient="records"))
        return 0 if bad.empty else 1
    currency = scenario.currency
    shown = front.rename(columns={c: f"{c} ({currency})" for c in front.columns
                                  if c.endswith("cost")})
    print(shown.round(2).to_string(index=False))
    print(f"{args.policy} at {len(front)} caps beside the hindsight plan (bound_*: its LP "
          f"bound, hindsight_*: its replay; least_carbon_kg: the least carbon with every "
          f"deadline met, a hindsight LP bound); {len(table)} runs stored in {args.db}; "
          f"table in {args.out}")
    return 0 if bad.empty else 1


__all__ = ["register", "run"]
