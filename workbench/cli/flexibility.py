"""``workbench flexibility``: the flexibility envelope of a scenario's plan.

Example::

    workbench flexibility --scenario seed3 --hours 3 --notice-h 2 --out offers.csv

Runs the policy (default: the product's default) once without any event, then for each
datacenter (or those of ``--datacenter``) and each start hour gives the plan's own peak
import in the window (``planned_import_kw``), how many kW below it the site can hold its
import for ``--hours`` hours announced ``--notice-h`` hours ahead with no deadline missed
(``sheddable_kw``, at ``limit_kw``) and the extra cost (:mod:`workbench.flexibility`).
``--json`` prints ``{"offers": [...]}``; ``--out`` writes the offers as CSV. An offer is
planned as an event with ``plan --grid-event DC,START,HOURS,LIMIT_KW,NOTICE_H``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.cli import progress_wanted
from workbench.cli._args import add_forecast_args, fail, forecast_settings, number
from workbench.cli._outputs import check_outputs
from workbench.cli.scenario import load_or_build
from workbench.policies import DEFAULT_POLICY, POLICY_NAMES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "flexibility",
        help="how many kW each site can shed, when, and what it costs",
        description="The flexibility envelope: per site and start hour, the kW the plan can "
        "hold its grid import below its own peak for some hours with no deadline missed, and "
        "the extra cost.")
    p.add_argument("--scenario", default="seed3", help="scenario name (default: seed3)")
    p.add_argument("--policy", default=DEFAULT_POLICY, choices=POLICY_NAMES,
                   help=f"the plan the offers are read from (default: {DEFAULT_POLICY})")
    p.add_argument("--hours", type=number(0, 24 * 7, low_open=True, unit="h"), default=3.0,
                   help="how long each event lasts, hours (default 3)")
    p.add_argument("--notice-h", type=number(0, 24 * 7, unit="h"), default=2.0,
                   help="hours of notice (default 2)")
    p.add_argument("--every-h", type=number(0, 24 * 7, low_open=True, unit="h"), default=1.0,
                   help="hours between start hours (default 1)")
    p.add_argument("--datacenter", action="append", default=None, metavar="DC",
                   help="only this datacenter (repeatable; default: every one)")
    add_forecast_args(p)
    p.add_argument("--out", type=Path, default=None, help="write the offers as CSV")
    p.add_argument("--json", action="store_true", help='print {"offers": [...]}')
    p.add_argument("--no-progress", action="store_true", help="hide the progress line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workbench.flexibility import Envelope, offers, start_slots
    from workbench.io.plan_csv import write_csv
    from workbench.policies import plans_batteries
    from workbench.runner import RunSpec, SpecError, simulate_spec

    bad = check_outputs([("--out", args.out)], args.db) if args.out else None
    if bad:
        return fail(bad)
    scenario = load_or_build(args.db, args.scenario)
    names = [d.name for d in scenario.datacenters]
    wanted = [d.strip() for arg in args.datacenter or () for d in arg.split(",") if d.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        return fail(f"--datacenter {', '.join(unknown)}: not in scenario {scenario.name}; "
                    f"it has {', '.join(names)}")
    starts = start_slots(scenario, args.hours, every_h=args.every_h)
    if not starts:
        return fail(f"--hours {args.hours:g}: longer than the horizon of {scenario.name}")
    try:
        spec = RunSpec(scenario.name, args.policy, baseline=False,
                       forecast=forecast_settings(args))
        if progress_wanted(args):
            held = ("no event" if not scenario.supply.grid_events else
                    "held to the scenario's own grid events given in kW")
            print(f"planning {scenario.name} with {args.policy} ({held}) ...",
                  file=sys.stderr)
        result, _ = simulate_spec(spec, scenario)
    except (SpecError, ValueError) as exc:
        return fail(exc)
    env = Envelope(scenario, result.plan, result.slots, result.jobs, spec.sim.restart_s,
                   batteries=plans_batteries(spec.policy))

    def told(done: int, total: int) -> None:
        print(f"\roffers {done}/{total}", end="" if done < total else "\n", file=sys.stderr)

    table = offers(env, args.hours, args.notice_h, wanted or None, starts,
                   progress=told if progress_wanted(args) else None)
    if args.out:
        write_csv(table, args.out)
    if args.json:
        print(json.dumps({"offers": json.loads(table.to_json(orient="records"))}))
        return 0
    cur = scenario.currency
    print(f"flexibility of {scenario.name} ({args.policy}'s plan): {args.hours:g}-hour events "
          f"with {args.notice_h:g} h notice, {len(starts)} start hours")
    for d, rows in table.groupby("datacenter", sort=False):
        best = rows.loc[rows["sheddable_kw"].idxmax()]
        print(f"  {d}: sheddable median {rows['sheddable_kw'].median():.1f} kW, most "
              f"{best['sheddable_kw']:.1f} kW from {best['start']} (planned "
              f"{best['planned_import_kw']:.1f} kW, held at {best['limit_kw']:.1f} kW, extra "
              f"cost {best['extra_cost']:.2f} {cur}); {int((rows['sheddable_kw'] > 0).sum())}"
              f" of {len(rows)} hours offer any")
    if args.out:
        print(f"  offers written to {args.out}")
    return 0


__all__ = ["register", "run"]
