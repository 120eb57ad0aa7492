"""``workbench plan``: run a policy over a scenario, store the run, export the plan.

Runs ``asap-home`` as the baseline too (unless ``--no-baseline``), prints a summary of the
policy against it (or one JSON object with ``--json``) and writes the plan and migrations
CSVs (formats: the README ("Plan and migrations CSV")). Progress bars and warnings go to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import textwrap
from collections.abc import Collection
from pathlib import Path
from typing import Any

from workbench.caps import Caps
from workbench.cli import progress_wanted
from workbench.cli._args import (
    add_forecast_args,
    fail,
    forecast_settings,
    number,
    parse_power_limits,
)
from workbench.cli._outputs import check_outputs
from workbench.cli.scenario import load_or_build
from workbench.cli.summary import (
    attribution_lines,
    bill_json,
    bill_lines,
    jct_lines,
    saving_lines,
)
from workbench.equal_work import LikeForLike, like_for_like
from workbench.events import NOTICE_H_DEFAULT, event_line, parse_event
from workbench.io.errors import output_error
from workbench.io.plan_csv import write_jobs_csv, write_migrations_csv, write_sites_csv
from workbench.model import Scenario
from workbench.optim.slot import pyomo_solver
from workbench.policies import DEFAULT_POLICY, POLICY_NAMES
from workbench.policies.base import RESIZE_S_DEFAULT, RESTART_S_DEFAULT
from workbench.policies.lyapunov import V_MAX
from workbench.policies.offline import LEAST_CARBON_LABEL
from workbench.recorders import LOCK_WAIT_S, CsvRecorder
from workbench.runner import (
    BASELINE,
    RunSpec,
    SimSettings,
    SpecError,
    run_spec,
    save_outcome,
    spec_key,
    strongest_baseline,
)
from workbench.sim import AllocationError, Recorder, RunResult
from workbench.supply import ignore_set

SUMMARY_KEYS: tuple[str, ...] = (
    "cost", "currency", "energy_kwh", "carbon_kg", "deadline_misses", "jobs_finished",
    "jobs_total", "jobs_unfinished", "migrations", "mean_jct_h", "p95_jct_h", "transfer_gb",
    "lost_s",
    "power_cap_violations", "equal_work_cost", "equal_work_carbon_kg", "unfinished_charge",
    "unfinished_carbon_kg", "unfinished_work_jobs", "green_share", "curtailed_kwh",
    "battery_soc_violations", "site_carbon_kg",
)
"""Metrics in the ``--json`` object (besides ``policy`` and ``bill``), for the run and its
baseline. ``bill`` is the bill from the site meter (:mod:`workbench.bill`): its parts
(``energy``, ``ppa``, ``export_credit``, ``demand``, ``capacity``), ``total`` and
``no_jobs_total`` (the same sites running no job); ``cost`` is ``total - no_jobs_total``,
the part the plan controls, and ``carbon_kg`` likewise (``site_carbon_kg`` the whole)."""

_MAX_WARNINGS = 10


def _slot_solver(text: str) -> str:
    """``--solver``: fast, pyomo or pyomo:NAME (:func:`workbench.optim.slot.pyomo_solver`);
    whether Pyomo has solver NAME is checked when the policy is made."""
    try:
        pyomo_solver(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="simulate a policy over a scenario, store the run and export the plan",
        description="Run a scheduling policy over a scenario's horizon, compare it with "
        "asap-home (run at home as soon as possible), store both runs and write the plan.",
    )
    p.add_argument("--scenario", default="seed3", help="scenario name (default: seed3)")
    p.add_argument("--policy", default=DEFAULT_POLICY, choices=POLICY_NAMES,
                   help=f"policy (default: {DEFAULT_POLICY})")
    p.add_argument("--V", type=number(0, V_MAX, low_open=True), default=None,
                   help="Lyapunov trade-off: weight of cost against queue backlogs (> 0 "
                   f"and <= {V_MAX:g})")
    p.add_argument("--carbon-cap", default=None, metavar="KG|PCT%",
                   help="carbon cap over the horizon: kg CO2 (e.g. 1200) or a percentage "
                   "below the asap-home run's carbon (e.g. 20%%)")
    p.add_argument("--migration-threshold", type=number(0, 100), default=None,
                   help="relative gain a move must exceed (hysteresis), e.g. 0.1")
    p.add_argument("--power-cap-kw", type=number(0, low_open=True, unit="kW"),
                   default=None, metavar="KW",
                   help="cap on every datacenter's grid import in each slot, kW, at its "
                   "connection as the site meter reads it (jobs x PUE, idle load, transfers, "
                   "battery charging, less own supply; lookahead, lyapunov, threshold, "
                   "offline plan within it, the simulator keeps it)")
    p.add_argument("--grid-event", action="append", default=None,
                   metavar="DC,START,HOURS,LIMIT_KW[,NOTICE_H]",
                   help="a grid event: DC may import at most LIMIT_KW (or a cut of the "
                   "plan's own import, e.g. 25%%) for HOURS from START (an ISO time, UTC "
                   "unless it names its offset, or hours after the horizon's start), "
                   f"announced NOTICE_H hours ahead (default {NOTICE_H_DEFAULT:g}); "
                   "repeatable. The policy sees it from its notice on, the site holds it; "
                   "reported against the same plan without it")
    p.add_argument("--ignore", default=None, metavar="LEVERS",
                   help="plan as if these levers did not exist while the simulator still "
                   "meters and bills them: any of supply,demand-charges,power-limits "
                   "(comma-separated)")
    p.add_argument("--power-limits", default="default", metavar="FRACTIONS",
                   help="menu of GPU power limits the policy may choose from, fractions of "
                   "each GPU's maximum board power in [0.4, 1] (e.g. 0.85,0.7,0.55; "
                   "default: 'default', 1,0.9,0.8,0.7,0.6,0.5, pruned per job and slot to "
                   "full power and the most efficient limit; 'none': full power only; full "
                   "power is always on the menu)")
    p.add_argument("--solver", default=None, type=_slot_solver, metavar="SOLVER",
                   help="lyapunov's and threshold's slot solver: fast (the highspy array fast "
                   "path, lyapunov's default), pyomo (the Pyomo MILP with HiGHS) or pyomo:NAME "
                   "(the Pyomo MILP with any solver Pyomo drives: pyomo:highs, pyomo:cbc, "
                   "pyomo:glpk, pyomo:gurobi)")
    add_forecast_args(p)
    p.add_argument("--noise", type=number(0, 10), default=0.0,
                   help="log-normal sigma of hidden throughput errors and measurement noise")
    p.add_argument("--seed", type=number(0, 2**32 - 1, integer=True),
                   default=0, help="random seed of noise (default 0)")
    p.add_argument("--restart-s", type=number(0, 86400, unit="seconds"), default=RESTART_S_DEFAULT,
                   help="seconds lost per start, resume, move or change of GPU type "
                   f"(default {RESTART_S_DEFAULT:g})")
    p.add_argument("--resize-s", type=number(0, 86400, unit="seconds"), default=RESIZE_S_DEFAULT,
                   help="seconds lost when a job changes its GPU count in the same pool "
                   f"(default {RESIZE_S_DEFAULT:g})")
    p.add_argument("--out", type=Path, default=None, help="plan CSV to write")
    p.add_argument("--migrations-out", type=Path, default=None,
                   help="migrations CSV to write")
    p.add_argument("--jobs-out", type=Path, default=None,
                   help="jobs CSV to write: one row per job (finish, missed, energy, cost, "
                   "carbon, data moved, time lost, migrations)")
    p.add_argument("--sites-out", type=Path, default=None,
                   help="sites CSV to write: one row per datacenter and slot as the site "
                   "meter read it (load, grid import, price, energy charge, supply, battery, "
                   "export, carbon, and the same site running no job)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-strongest", action="store_true",
                   help="skip the strongest comparison that plans without hindsight (the "
                   "rule-based and greedy policies run beside the plan, not stored; the "
                   "summary shows the cheapest of them on equal work beside asap-home)")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the asap-home comparison run")
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bars (shown only when stderr is a terminal)")
    p.add_argument("--lock-wait-s", type=number(0, 3600, unit="seconds"), default=LOCK_WAIT_S,
                   help="how long to retry a store locked by another process before saving "
                   f"the runs to a side file (default {LOCK_WAIT_S:g})")
    p.set_defaults(func=run)


def _summary(policy: str, result: RunResult) -> dict[str, Any]:
    out: dict[str, Any] = {"policy": policy}
    m = result.metrics
    for key in SUMMARY_KEYS:
        value = m.get(key, 0)
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    out["bill"] = bill_json(m)
    return out


WARNING_CHARS = 200
"""The most characters of a run's warning the CLI prints (the whole of it is stored with
the run: ``workbench runs show RUN``)."""

_MORE = re.compile(r" \(\+(\d+) more\)$")


def short_warning(msg: str, where: str, limit: int = WARNING_CHARS) -> str:
    """A run's warning in one short line: a list of ``id: reason`` items keeps the ids
    alone (and how many more), anything else is cut at a word; ``where`` says where the
    whole text is."""
    if len(msg) <= limit:
        return msg
    head, sep, rest = msg.partition(": ")
    if sep and "; " in rest:
        more = _MORE.search(rest)
        n_more = int(more.group(1)) if more else 0
        names = [item.split(": ", 1)[0] for item in (rest[:more.start()] if more
                                                     else rest).split("; ")]
        while names:
            extra = f" and {n_more} more" if n_more else ""
            text = f"{head}: {', '.join(names)}{extra} (reasons: {where})"
            if len(text) <= limit or len(names) == 1:
                return text
            names.pop()
            n_more += 1
    cut = msg[:max(limit - len(where) - 6, 20)].rsplit(" ", 1)[0]
    return f"{cut} … ({where})"


def _warn(name: str, result: RunResult, run_id: str | None,
          told: Collection[str] = ()) -> None:
    """Print a run's warnings, each once: those ``told`` before the run are not repeated."""
    where = f"`workbench runs show {run_id}`" if run_id else "the run's warnings"
    todo = [msg for msg in dict.fromkeys(result.warnings) if msg not in told]
    for msg in todo[:_MAX_WARNINGS]:
        print(f"warning ({name}): {short_warning(msg, where)}", file=sys.stderr)
    if len(todo) > _MAX_WARNINGS:
        print(f"warning ({name}): ... and {len(todo) - _MAX_WARNINGS} more "
              f"({where})", file=sys.stderr)


def _pct(new: float, old: float) -> str:
    if not (math.isfinite(new) and math.isfinite(old)) or old == 0:
        return ""
    return f"{100.0 * (new - old) / old:+.1f}%"


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _print_summary(
    scenario: Scenario, name: str, run: dict[str, Any], base: dict[str, Any] | None,
    cmp: LikeForLike, cap_kg: float | None, stored_in: str, extra: dict[str, Any],
    run_id: str | None, args: argparse.Namespace,
    strong: tuple[dict[str, Any], LikeForLike] | None = None,
) -> None:
    cur = run["currency"]
    hours = scenario.n_slots * scenario.slot_s / 3600
    label = "hindsight plan (replayed)" if name == "offline" else name
    print(f"{scenario.name}: {label} over {scenario.n_slots} slots of "
          f"{scenario.slot_s / 60:g} min ({hours:g} h)"
          + (f", against {BASELINE}" if base else "")
          + f"; forecast: {extra['forecast']}")
    refs = [(BASELINE, base)] if base else []
    if strong is not None:
        refs.append((strong[0]["policy"], strong[0]))
    for d in (run, *(r for _, r in refs)):
        d["bill_total"] = (d.get("bill") or {}).get("total")
        d["lost_h"] = None if d.get("lost_s") is None else float(d["lost_s"]) / 3600.0
    rows = [
        (f"bill ({cur})", "bill_total", 2), (f"  plan's part ({cur})", "cost", 2),
        (f"  on equal work ({cur})", "equal_work_cost", 2),
        ("jobs' energy (kWh)", "energy_kwh", 1),
        ("carbon (kg CO2)", "site_carbon_kg", 1), ("  plan's part (kg)", "carbon_kg", 1),
        ("deadline misses", "deadline_misses", 0),
        ("jobs finished", "jobs_finished", 0), ("migrations", "migrations", 0),
        ("data moved (GB)", "transfer_gb", 1), ("time lost (job-h)", "lost_h", 1),
        ("mean JCT (h)", "mean_jct_h", 2), ("p95 JCT (h)", "p95_jct_h", 2),
    ]
    head = f"  {'':<22}{name:>16}"
    for ref, _ in refs:
        head += f"{ref[:15]:>16}{'change':>10}"
    print(head)
    for label, key, digits in rows:
        line = f"  {label:<22}{_fmt(run[key], digits):>16}"
        if key == "jobs_finished":
            done = f"{run[key]}/{run['jobs_total']}"
            line = f"  {label:<22}{done:>16}"
        for _, other_run in refs:
            other = (f"{other_run[key]}/{other_run['jobs_total']}" if key == "jobs_finished"
                     else _fmt(other_run[key], digits))
            change = ""
            if key in ("bill_total", "cost", "equal_work_cost", "energy_kwh",
                       "site_carbon_kg", "carbon_kg", "mean_jct_h", "p95_jct_h") \
                    and run[key] is not None \
                    and other_run[key] is not None:
                change = _pct(float(run[key]), float(other_run[key]))
            line += f"{other:>16}{change:>10}"
        print(line)
    if base:
        for line in saving_lines(cmp, run, base, cur):
            print(f"  {line}")
    if strong is not None:
        s_cmp = strong[1]
        print("\n".join(textwrap.wrap(
            f"against the strongest comparison that plans without hindsight, "
            f"{strong[0]['policy']}: {s_cmp.saving:,.2f} {cur} saved on equal work, "
            f"{s_cmp.saving_pct:.1f}% of its bill and {s_cmp.jobs_saving_pct:.1f}% of its "
            "controllable part", width=96, initial_indent="  ", subsequent_indent="    ")))
        for line in jct_lines(s_cmp, strong[0]["policy"]):
            print(f"    {line}")
    for line in attribution_lines(extra.get("attribution"), extra.get("bound"), cur, cmp):
        print(f"  {line}")
    for line in bill_lines(run, base, extra.get("bill_note", ""), cur):
        print(f"  {line}")
    if cap_kg is not None:
        floor = extra.get("carbon_floor")
        if floor is not None:  # told before the run: its verdict before the run's
            print("\n".join(textwrap.wrap(f"told before the run: {floor['note']}", width=96,
                                           initial_indent="  ", subsequent_indent="    ")))
        diff = run["carbon_kg"] - cap_kg
        where = "above" if diff > 0 else "below"
        verdict = "MISSED" if diff > cap_kg * 1e-9 else "met"
        print(f"  carbon cap {cap_kg:,.1f} kg {verdict}: the run ended {abs(diff):,.1f} kg "
              f"({abs(100 * diff / cap_kg):.1f}%) {where} it")
        least = extra.get("least_carbon_kg")
        if least is not None:
            print(f"  least carbon with every deadline met, in hindsight (a yardstick no "
                  f"decision read): {least:,.1f} kg ({LEAST_CARBON_LABEL})"
                  + ("; the cap is below it" if cap_kg < least else ""))
    if args.power_cap_kw is not None:
        n = run["power_cap_violations"]
        print(f"  power cap {args.power_cap_kw:g} kW of grid import per datacenter "
              + ("met in every slot" if not n else f"MISSED in {n} datacenter-slot(s)"))
    for ev in extra.get("grid_events") or ():
        print(f"  {event_line(ev)}")
    if run_id:
        print(f"  stored as run {run_id} in {stored_in}")
    if args.out:
        print(f"  plan written to {args.out}")
    if args.migrations_out:
        print(f"  migrations written to {args.migrations_out}")
    if args.jobs_out:
        print(f"  jobs written to {args.jobs_out}")
    if args.sites_out:
        print(f"  sites written to {args.sites_out}")


def spec_of(args: argparse.Namespace) -> RunSpec:
    """The run ``plan``'s flags describe. Raises ValueError (SpecError) naming the flag."""
    try:
        caps = Caps.parse_carbon(args.carbon_cap, power_kw=args.power_cap_kw)
    except ValueError as exc:
        raise SpecError(f"--carbon-cap {args.carbon_cap!r}: {exc}") from None
    try:
        caps = caps.with_events([parse_event(e) for e in args.grid_event or ()])
    except ValueError as exc:
        raise SpecError(f"--grid-event: {exc}") from None
    knobs: dict[str, Any] = {}
    for flag, key in (("V", "V"), ("migration_threshold", "migration_threshold"),
                      ("solver", "solver")):
        if getattr(args, flag) is not None:
            knobs[key] = getattr(args, flag)
    try:
        ignore = ignore_set(args.ignore)
    except ValueError as exc:
        raise SpecError(f"--ignore {args.ignore!r}: {exc}") from None
    return RunSpec(
        scenario=args.scenario, policy=args.policy, knobs=knobs, caps=caps,
        forecast=forecast_settings(args),
        sim=SimSettings(noise=args.noise, seed=args.seed, restart_s=args.restart_s,
                        resize_s=args.resize_s),
        baseline=not args.no_baseline, ignore=ignore,
        power_limits=parse_power_limits(args.power_limits))


def _stored_baseline(args: argparse.Namespace, spec: RunSpec, scenario: Scenario
                     ) -> tuple[str | None, tuple[str, RunResult] | None]:
    """The :func:`~workbench.runner.spec_key` of the run's baseline and, when the store
    holds a baseline of that key (the same scenario content and settings), its id and run:
    ``plan`` reuses it instead of running and storing an identical one."""
    if not (spec.baseline or spec.caps.needs_baseline) or args.db == ":memory:":
        return None, None
    from workbench.runs import load_result, stored_baseline, typed_metrics
    from workbench.store import Store, StoreError

    try:
        with Store(args.db, read_only=True) as store:
            key = spec_key(spec.comparison(BASELINE), scenario,
                           store.scenario_fingerprint(scenario.name))
            rid = stored_baseline(store, scenario.name, key)
            if rid is None:
                return key, None
            base = load_result(store, rid, scenario)
    except StoreError:  # locked by another process: run the baseline, as without a store
        return None, None
    base.metrics = typed_metrics(base.metrics)  # counts as the run gave them (ints, flags)
    return key, (rid, base)


def run(args: argparse.Namespace) -> int:
    try:
        spec = spec_of(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bad_output = check_outputs([("--out", args.out), ("--migrations-out", args.migrations_out),
                                ("--jobs-out", args.jobs_out), ("--sites-out", args.sites_out)],
                               args.db)
    if bad_output:
        return fail(bad_output)
    scenario = load_or_build(args.db, args.scenario)
    key, reused = _stored_baseline(args, spec, scenario)
    recorders: list[Recorder] = []
    csv_rec = None if args.out is None else CsvRecorder(args.out, args.migrations_out)
    if csv_rec is not None:
        recorders.append(csv_rec)
    told: list[str] = []  # warnings printed before the policy ran: not repeated after it

    def tell(msg: str) -> None:
        told.append(msg)
        print(f"warning: {msg}", file=sys.stderr)

    try:
        outcome = run_spec(spec, scenario, recorders=recorders,
                           progress=progress_wanted(args), notify=tell,
                           stored_baseline=reused)
        result = outcome.result
        if args.migrations_out is not None and args.out is None:
            write_migrations_csv(result.migrations, args.migrations_out)
        if args.jobs_out is not None:
            write_jobs_csv(result.jobs, args.jobs_out)
        if args.sites_out is not None:
            write_sites_csv(result.slots, [d.name for d in scenario.datacenters],
                            args.sites_out)
        strongest = (None if outcome.baseline is None or args.no_strongest
                     else strongest_baseline(spec, scenario))
    except (AllocationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        # An output that cannot be written (a full disk, no permission, a read-only place):
        # the writers name the file (OutputError); nothing is stored.
        print(f"error: {output_error(exc, exc.filename or args.out)}", file=sys.stderr)
        return 2
    finally:
        if csv_rec is not None:
            csv_rec.abort()  # no-op after a finished run; drops the partial files otherwise
    # The run and its baseline are stored together at the end, in one transaction: a plan
    # killed midway stores nothing (no dangling baseline).
    saved = save_outcome(outcome, args.db, wait_s=args.lock_wait_s, baseline_key=key)
    run_id = saved.run_ids[-1]
    if outcome.baseline is not None:
        base_id = outcome.baseline_run_id or (None if saved.side_file else saved.run_ids[0])
        _warn(BASELINE, outcome.baseline, base_id)
    if saved.side_file:
        print(f"warning: store {args.db} stayed locked for {saved.waited_s:.0f} s; the "
              f"run{'s were' if len(saved.run_ids) > 1 else ' was'} saved to {saved.path} "
              f"instead (copy {'them' if len(saved.run_ids) > 1 else 'it'} in with "
              f"`workbench --db {args.db} import runs {saved.path}`)", file=sys.stderr)
    # Each of the run's warnings once, short (the library's log records of them are left
    # out of the terminal: workbench.cli filters workbench.sim.results.RUN_WARNING).
    _warn(args.policy, result, None if saved.side_file else run_id, told)

    summary = _summary(args.policy, result)
    base = None if outcome.baseline is None else _summary(BASELINE, outcome.baseline)
    cap_kg = outcome.carbon_cap_kg
    extra: dict[str, Any] = {"forecast": outcome.forecast_mode}
    if cap_kg is not None:
        extra.update(carbon_cap_kg=cap_kg, carbon_kg=result.metrics["carbon_kg"],
                     carbon_cap_met=bool(result.metrics.get("carbon_cap_met",
                                                            result.metrics["carbon_kg"]
                                                            <= cap_kg)),
                     least_carbon_kg=outcome.least_carbon_kg,
                     carbon_floor_kg=outcome.carbon_floor_kg,
                     carbon_floor=result.meta.get("carbon_floor"))
    else:
        extra["carbon_cap_kg"] = None
    if args.power_cap_kw is not None:
        extra["power_cap_kw"] = args.power_cap_kw
    if result.meta.get("grid_events") is not None:
        extra["grid_events"] = result.meta["grid_events"]
    if outcome.attribution is not None:
        extra["attribution"] = outcome.attribution
    extra["bill_note"] = str(result.metrics.get("bill_note") or "")
    if outcome.bound is not None:
        extra["bound"] = dict(result.meta["bound"])
    # The one comparison, from the runs' metrics (every face computes it the same way).
    cmp = like_for_like(result.metrics, None if outcome.baseline is None
                        else outcome.baseline.metrics, extra.get("bound"))
    strong = None if strongest is None else (
        _summary(strongest.policy, strongest), like_for_like(result.metrics, strongest.metrics))
    if args.json:
        obj = {**summary, "baseline": base, "scenario": scenario.name,
               "run_id": run_id, "stored_in": str(saved.path), **extra,
               "like_for_like": cmp.as_dict(),
               "strongest_baseline": None if strong is None else {
                   **strong[0], "like_for_like": strong[1].as_dict()}}
        print(json.dumps(obj))
    else:
        _print_summary(scenario, args.policy, summary, base, cmp, cap_kg, str(saved.path),
                       extra, run_id, args, strong)
    return 0
