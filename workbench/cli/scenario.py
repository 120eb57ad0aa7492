"""``workbench scenario ...`` and ``workbench cubes ...``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

from workbench import cubes, scenarios
from workbench.cli._args import fail, number
from workbench.model import Scenario, ScenarioError
from workbench.store import Store

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scenario", help="list, show, generate, build and delete scenarios")
    ssub = p.add_subparsers(dest="scenario_command", metavar="ACTION", required=True)

    ls = ssub.add_parser("list", help="built-in scenarios and those in the store")
    ls.add_argument("--json", action="store_true", help="print one JSON object")
    ls.set_defaults(func=_list, reads_store=True)

    show = ssub.add_parser("show", help="datacenters, GPU pools, links, horizon and jobs")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=_show)

    gen = ssub.add_parser("generate", help="generate a built-in scenario into the store")
    gen.add_argument("name", choices=scenarios.builtin_names())
    gen.add_argument("--seed", type=number(0, 2**32 - 1, integer=True),
                     default=0, help="random seed (default 0)")
    gen.add_argument("--as", dest="save_as", default=None, metavar="NAME",
                     help="store it under this name (default: the built-in's own)")
    gen.add_argument("--replace", action="store_true",
                     help="replace a job set or another scenario stored under the name")
    gen.set_defaults(func=_generate)

    bld = ssub.add_parser("build", help="compose a scenario from imported data and a TOML config "
                          "(schema: docs/importers.md)")
    bld.add_argument("name", help="scenario name (overrides [scenario] name)")
    bld.add_argument("--config", required=True, help="scenario TOML file")
    bld.add_argument("--replace", action="store_true",
                     help="replace a different scenario stored under the name")
    bld.set_defaults(func=_build)

    rm = ssub.add_parser(
        "delete", help="remove a stored scenario with its runs (imported data stays)",
        description="Remove a stored scenario: its datacenters, GPU pools, links and jobs, "
        "every run stored for it (plans, migrations, slots, metrics) and the grid rows a "
        "scenario wrote itself that no stored scenario reads any more. The imported grid "
        "series, job sets and profiles it was built from stay, so `scenario build` can make "
        "it again. Like `runs delete`, it asks nothing.")
    rm.add_argument("name", help="a scenario in the store (`workbench scenario list`)")
    rm.add_argument("--json", action="store_true", help="print one JSON object")
    rm.set_defaults(func=_delete, reads_store=True)

    c = sub.add_parser("cubes", help="per-region mean, min and max of price and carbon")
    c.add_argument("name", help="scenario name")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=_cubes)


def load_or_build(db: str, name: str, seed: int = 0) -> Scenario:
    """The scenario a run stores its results against: from the store; a built-in one the
    store lacks is generated and saved first (said in the log), never over a job set of
    its name (:func:`workbench.scenarios.save_checked` refuses, naming the fix)."""
    with Store(db) as store:
        if store.has_scenario(name) or name not in scenarios.BUILTIN:
            return store.load_scenario(name)  # raises with the known names
        scenario = scenarios.build_builtin(name, seed=seed)
        scenarios.save_checked(store, scenario, fix=(
            f"store the built-in under another name (`workbench scenario generate {name} --as "
            f"{name}-builtin`) and pass that name, or pass --db with another store"))
    log.info("generated the built-in scenario %s (seed %d) into %s", name, seed, db)
    return scenario


def read_scenario(db: str, name: str) -> Scenario:
    """The scenario a read-only command shows (``scenario show``, ``cubes``, ``quote``):
    the stored one, else a built-in generated in memory; nothing is written, and no store
    file is created where ``--db`` names none (:func:`workbench.scenarios.stored_or_builtin`)."""
    if db != ":memory:" and not Path(db).exists():
        if name in scenarios.BUILTIN:
            return scenarios.stored_or_builtin(None, name)
        raise ScenarioError(f"no scenario {name!r}: store {db} does not exist (built-in "
                            f"scenarios: {', '.join(scenarios.builtin_names())}); check --db")
    with Store(db, read_only=True) as store:
        return scenarios.stored_or_builtin(store, name)


def _list(args: argparse.Namespace) -> int:
    with Store(args.db, read_only=True) as store:
        stored = store.scenario_names()
    data = {"builtin": scenarios.builtin_names(), "stored": stored}
    if args.json:
        print(json.dumps(data))
    else:
        print("built-in:", ", ".join(data["builtin"]) or "none")
        print(f"in {args.db}:", ", ".join(stored) or "none")
    return 0


def _show(args: argparse.Namespace) -> int:
    scenario = read_scenario(args.db, args.name)
    info = scenarios.describe(scenario)
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"scenario {info['name']}: {info['description']}")
    print(f"horizon {info['start']} .. {info['end']}  ({info['slots']} slots of "
          f"{info['slot_minutes']:g} min), prices in {info['currency']}/kWh")
    print("datacenters:")
    for r in info["regions"]:
        print(f"  {r['datacenter']:<12} region {r['region']:<10} zone {r['grid_zone']:<7} "
              f"PUE {r['pue']:.2f}")
    print("GPU pools:")
    for p in info["gpu_pools"]:
        print(f"  {p['datacenter']:<12} {p['gpu_type']:<11} x{p['count']:<4} "
              f"{p['idle_power_w']:.0f}-{p['max_power_w']:.0f} W")
    print("links:")
    for lk in info["links"]:
        print(f"  {lk['src']:<12} <-> {lk['dst']:<12} {lk['bandwidth_gbps']:g} Gbit/s, "
              f"{lk['latency_ms']:g} ms")
    j = info["jobs"]
    print(f"jobs: {j['training']} training, {j['inference']} inference services")
    return 0


def _generate(args: argparse.Namespace) -> int:
    name = args.name if args.save_as is None else args.save_as.strip()
    if not name:
        return fail("--as is empty; give the scenario a name, e.g. --as seed3-b")
    scenario = scenarios.build_builtin(args.name, seed=args.seed)
    if name != scenario.name:
        scenario = dataclasses.replace(scenario, name=name)
    with Store(args.db) as store:
        other = f"{args.name}-builtin" if args.seed == 0 else f"{args.name}-seed{args.seed}"
        done = scenarios.save_checked(store, scenario, replace=args.replace, fix=(
            "store it under another name (`workbench scenario generate "
            f"{args.name}{'' if args.seed == 0 else f' --seed {args.seed}'} --as "
            f"{other if other != name else 'NAME'}`), or pass --replace"))
    jobs = f"{len(scenario.jobs)} jobs, {scenario.n_slots} slots"
    built = f"{args.name} (seed {args.seed})"
    print({"saved": f"generated scenario {name} from {built} into {args.db}: {jobs}",
           "replaced": f"generated scenario {name} from {built} into {args.db}, replacing "
                       f"what was stored under that name: {jobs}",
           "unchanged": f"scenario {name} in {args.db} is already {built} as generated: "
                        f"nothing written ({jobs})"}[done], file=sys.stderr)
    return 0


def _build(args: argparse.Namespace) -> int:
    # BuildError is a ScenarioError: main prints it
    from workbench.build import build_scenario, load_config, save_built

    with Store(args.db) as store:
        scenario = build_scenario(store, load_config(args.config), args.name)
        done = save_built(store, scenario, replace=args.replace)
    what = {"saved": "built scenario {} into {}",
            "replaced": "rebuilt scenario {} in {}, replacing the stored one",
            "unchanged": "scenario {} in {} is already this build, nothing written"}[done]
    print(what.format(scenario.name, args.db) + f": {len(scenario.datacenters)} "
          f"datacenters, {len(scenario.links)} links, {len(scenario.jobs)} jobs, "
          f"{scenario.n_slots} slots of {scenario.slot_s / 60:g} min", file=sys.stderr)
    return 0


def _delete(args: argparse.Namespace) -> int:
    with Store(args.db) as store:
        if not store.has_scenario(args.name):
            table = store.job_sets()
            sets = set(table.loc[~table["is_scenario"].astype(bool), "name"])
            if args.name in sets:
                print(f"error: {args.name!r} is a job set in {args.db}, not a scenario; "
                      "`scenario delete` removes scenarios only (the job set stays for "
                      "builds)", file=sys.stderr)
                return 2
            if args.name in scenarios.BUILTIN:
                print(f"error: {args.name!r} is built in and not stored in {args.db}: "
                      "nothing to delete", file=sys.stderr)
                return 2
        gone = store.delete_scenario(args.name)  # a StoreError names the stored ones
    if args.json:
        print(json.dumps({"deleted": args.name, **gone}))
        return 0
    runs = gone["runs"]
    again = (f"`workbench scenario generate {args.name}` makes it again"
             if args.name in scenarios.BUILTIN else "`workbench scenario build` makes it "
             "again from them")
    print(f"deleted scenario {args.name} from {args.db}: {gone['datacenters']} datacenters, "
          f"{gone['gpu_pools']} GPU pools, {gone['links']} links, {gone['jobs']} jobs, "
          f"{len(runs)} stored run(s) with their plans"
          + (f" ({', '.join(runs[:5])}{', ...' if len(runs) > 5 else ''})" if runs else "")
          + f" and {gone['grid_rows']} grid rows that scenarios wrote themselves and none "
          f"reads now; the imported grid series, job sets and profiles stay ({again})")
    return 0


def _cubes(args: argparse.Namespace) -> int:
    scenario = read_scenario(args.db, args.name)
    table = cubes.summary(scenario.grid)
    currency = scenario.grid["price_per_kwh"].attrs.get("currency", scenario.currency)
    if args.json:
        out = {
            "scenario": scenario.name, "currency": currency, "slot_s": scenario.slot_s,
            "regions": {
                row["region"]: {k: row[k] for k in table.columns if k != "region"}
                for row in table.to_dict("records")
            },
        }
        print(json.dumps(out))
        return 0
    print(f"{'region':<12} {'price mean':>11} {'min':>7} {'max':>7}   "
          f"{'carbon mean':>11} {'min':>6} {'max':>6}")
    for row in table.to_dict("records"):
        print(f"{row['region']:<12} {row['price_per_kwh_mean']:>11.3f} "
              f"{row['price_per_kwh_min']:>7.3f} {row['price_per_kwh_max']:>7.3f}   "
              f"{row['carbon_g_per_kwh_mean']:>11.0f} {row['carbon_g_per_kwh_min']:>6.0f} "
              f"{row['carbon_g_per_kwh_max']:>6.0f}")
    print(f"(price in {currency}/kWh, carbon in gCO2/kWh)")
    return 0
