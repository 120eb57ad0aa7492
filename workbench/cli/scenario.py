"""``workbench scenario ...`` and ``workbench cubes ...``."""

from __future__ import annotations

import argparse
import json
import sys

from workbench import cubes, scenarios
from workbench.cli._args import number
from workbench.model import Scenario
from workbench.store import Store


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scenario", help="list, show and generate scenarios")
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
    gen.set_defaults(func=_generate)

    bld = ssub.add_parser("build", help="compose a scenario from imported data and a TOML config "
                          "(schema: docs/importers.md)")
    bld.add_argument("name", help="scenario name (overrides [scenario] name)")
    bld.add_argument("--config", required=True, help="scenario TOML file")
    bld.set_defaults(func=_build)

    c = sub.add_parser("cubes", help="per-region mean, min and max of price and carbon")
    c.add_argument("name", help="scenario name")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=_cubes)


def load_or_build(db: str, name: str, seed: int = 0) -> Scenario:
    """The scenario from the store; a built-in one missing from the store is generated and
    saved first."""
    with Store(db) as store:
        if store.has_scenario(name):
            return store.load_scenario(name)
        if name in scenarios.BUILTIN:
            scenario = scenarios.build_builtin(name, seed=seed)
            store.save_scenario(scenario)
            return scenario
        return store.load_scenario(name)  # raises with the known names


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
    scenario = load_or_build(args.db, args.name)
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
    scenario = scenarios.build_builtin(args.name, seed=args.seed)
    with Store(args.db) as store:
        store.save_scenario(scenario)
    print(f"generated scenario {scenario.name} (seed {args.seed}) into {args.db}: "
          f"{len(scenario.jobs)} jobs, {scenario.n_slots} slots", file=sys.stderr)
    return 0


def _build(args: argparse.Namespace) -> int:
    from workbench.build import build_and_save  # BuildError is a ScenarioError: main prints it

    with Store(args.db) as store:
        scenario = build_and_save(store, args.config, args.name)
    print(f"built scenario {scenario.name} into {args.db}: {len(scenario.datacenters)} "
          f"datacenters, {len(scenario.links)} links, {len(scenario.jobs)} jobs, "
          f"{scenario.n_slots} slots of {scenario.slot_s // 60} min", file=sys.stderr)
    return 0


def _cubes(args: argparse.Namespace) -> int:
    scenario = load_or_build(args.db, args.name)
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
