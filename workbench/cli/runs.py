"""``workbench runs list|show|compare|export|delete`` and ``workbench data list``.

Stored runs are found by id (a unique prefix is enough), by name, or as ``latest``.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd

from workbench import runs as runs_mod
from workbench.cli._args import fail
from workbench.cli._outputs import check_outputs
from workbench.cli.imports import arrival_span, hours_after_trace_start, trace_relative
from workbench.equal_work import like_for_like
from workbench.io.plan_csv import write_migrations_csv, write_plan_csv, write_sites_csv
from workbench.model import ScenarioError
from workbench.scenarios import stored_or_builtin
from workbench.store import Store, StoreError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list, show, compare, export or delete stored runs")
    p.set_defaults(reads_store=True)  # a missing --db file is refused, not created
    rsub = p.add_subparsers(dest="runs_command", metavar="ACTION", required=True)

    ls = rsub.add_parser("list", help="stored runs, newest first, with cost, carbon, misses")
    ls.add_argument("--scenario", default=None, help="only this scenario's runs")
    ls.add_argument("--json", action="store_true", help="print one JSON object")
    ls.set_defaults(func=_list)

    show = rsub.add_parser("show", help="one run: knobs, settings, metrics, warnings")
    show.add_argument("run", help="run id (a unique prefix), name, or 'latest'")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=_show)

    cmp_ = rsub.add_parser("compare", help="two or more runs side by side")
    cmp_.add_argument("runs", nargs="+", metavar="RUN", help="run ids, names or 'latest'")
    cmp_.add_argument("--json", action="store_true", help="print one JSON object")
    cmp_.set_defaults(func=_compare)

    exp = rsub.add_parser("export", help="write a stored run's plan (and migrations) CSV")
    exp.add_argument("run", help="run id (a unique prefix), name, or 'latest'")
    exp.add_argument("--out", type=Path, required=True, help="plan CSV to write")
    exp.add_argument("--migrations-out", type=Path, default=None,
                     help="migrations CSV to write")
    exp.add_argument("--sites-out", type=Path, default=None,
                     help="sites CSV to write: one row per datacenter and slot as the site "
                     "meter read it (a run stored before the meter: recomputed from its slot "
                     "records)")
    exp.add_argument("--json", action="store_true", help="print one JSON object")
    exp.set_defaults(func=_export)

    rn = rsub.add_parser("rename", help="give a stored run a name")
    rn.add_argument("run", help="run id (a unique prefix), name, or 'latest'")
    rn.add_argument("name", help="the new name (empty string: none)")
    rn.set_defaults(func=_rename)

    rm = rsub.add_parser("delete", help="remove stored runs and their plans")
    rm.add_argument("runs", nargs="+", metavar="RUN", help="run ids, names or 'latest'")
    rm.add_argument("--json", action="store_true", help="print one JSON object")
    rm.set_defaults(func=_delete)

    d = sub.add_parser("data", help="what the store holds: grid series, job sets, profiles")
    d.set_defaults(reads_store=True)
    dsub = d.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    dl = dsub.add_parser("list", help="grid series (region, kind, unit, span, rows), job "
                         "sets and performance profiles")
    dl.add_argument("--json", action="store_true", help="print one JSON object")
    dl.set_defaults(func=_data_list)


def _num(value: Any, fmt: str = ",.2f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, int):
        return f"{value:,d}"
    return format(float(value), fmt)


def _list(args: argparse.Namespace) -> int:
    with Store(args.db, read_only=True) as store:
        rows = runs_mod.summary_rows(store, args.scenario)
    if args.json:
        print(json.dumps({"runs": rows}))
        return 0
    if not rows:
        print(f"no runs in {args.db}; make one with `workbench plan`")
        return 0
    print(f"{'run':<13}{'created (UTC)':<18}{'scenario':<10}{'plan part':>12} {'cur':<4}"
          f"{'kg CO2':>10}{'misses':>7}{'unfin.':>7}  name / knobs")
    for r in rows:
        created = r["created_utc"][:16].replace("T", " ")
        what = (f"{r['name']}: " if r["name"] else "") + r["knobs"]
        if r["status"] == "baseline":
            what += " (baseline)"
        print(f"{r['run_id']:<13}{created:<18}{r['scenario']:<10}{_num(r['cost']):>12} "
              f"{r['currency'] or '':<4}{_num(r['carbon_kg'], ',.1f'):>10}"
              f"{_num(r['deadline_misses']):>7}{_num(r['jobs_unfinished']):>7}  {what}")
    return 0


def _show(args: argparse.Namespace) -> int:
    # Here, not at the top: `runs list` starts without the planners `plan` imports.
    from workbench.cli.summary import attribution_lines, bill_json, bill_text, saving_lines
    from workbench.events import event_line

    with Store(args.db, read_only=True) as store:
        rid = store.resolve_run(args.run)
        info = store.run_info(rid)
        sc = _scenario(store, str(info["scenario"]))
        loaded = None if isinstance(sc, str) else sc
        result = runs_mod.load_result(store, rid, loaded)
        n_plan = len(result.plan)
        n_mig = len(result.migrations)
        metrics = runs_mod.typed_metrics(result.metrics)
        if loaded is not None:
            runs_mod.fill_equal_work(metrics, result.plan, loaded)
        att, why = (None, sc) if isinstance(sc, str) else runs_mod.stored_attribution(
            store, rid, sc, result)
        ref = runs_mod.reference_run(store, {**info, "run_id": rid}) \
            if info["policy"] != runs_mod.REFERENCE_POLICY else None
        base = runs_mod.stored_metrics(store, ref, loaded) if ref else None
        bound = runs_mod.with_equal_work_bound(info.get("bound"), loaded,
                                               runs_mod.run_settings(info).get("slot_s"))
    warnings = [w for w in str(info.get("log") or "").splitlines() if w.strip()]
    if args.json:
        obj = {"run_id": rid, "name": info.get("name"), "scenario": info["scenario"],
               "policy": info["policy"], "created_utc": pd.Timestamp(
                   info["created_utc"]).isoformat(), "status": info.get("status"),
               "knobs": info["knobs"], "settings": info["settings"],
               "metrics": {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                           for k, v in metrics.items()},
               "plan_rows": n_plan, "migrations": n_mig, "warnings": warnings,
               "bill": bill_json(metrics),
               "attribution": att, "attribution_missing": why or None,
               "bound": bound, "grid_events": result.meta.get("grid_events"),
               "like_for_like": like_for_like(metrics, base, bound).as_dict()}
        print(json.dumps(obj, default=str))
        return 0
    print(f"run {rid}" + (f" ({info['name']})" if info.get("name") else "")
          + f" of {info['policy']} on {info['scenario']}, stored "
          f"{pd.Timestamp(info['created_utc']):%Y-%m-%d %H:%M} UTC, status {info['status']}")
    print(f"  {runs_mod.knobs_text(info)}")
    cur = metrics.get("currency", "")
    bill = bill_json(metrics)
    if bill["total"] is not None:
        print(textwrap.fill(f"bill ({cur}): {bill_text(bill)}", width=96,
                            initial_indent="  ", subsequent_indent="    "))
    if metrics.get("meter_note"):
        print(f"  note: {metrics['meter_note']}")
    print(f"  the plan's part of the bill {_num(metrics.get('cost'))} {cur}, carbon "
          f"{_num(metrics.get('carbon_kg'), ',.1f')} kg, energy "
          f"{_num(metrics.get('energy_kwh'), ',.1f')} kWh, mean JCT "
          f"{_num(metrics.get('mean_jct_h'))} h")
    print(f"  deadline misses {_num(metrics.get('deadline_misses'))}, jobs unfinished "
          f"{_num(metrics.get('jobs_unfinished'))}, migrations "
          f"{_num(metrics.get('migrations'))}; {n_plan:,d} plan rows")
    cmp = like_for_like(metrics, base, bound)
    for line in saving_lines(cmp, metrics, base, cur) if base else [why]:
        print(f"  {line}")
    for line in attribution_lines(att, bound, cur, cmp):
        print(f"  {line}")
    for ev in result.meta.get("grid_events") or ():
        print(f"  {event_line(ev)}")
    for w in warnings:
        print(f"  warning: {w}")
    return 0


def _scenario(store: Store, name: str) -> Any:
    """The stored scenario ``name``, or why it cannot be loaded (a line to print)."""
    try:
        return stored_or_builtin(store, name)  # an app's run of a built-in not stored
    except (StoreError, ScenarioError, KeyError) as exc:
        return f"attribution not available: scenario {name!r} cannot be loaded ({exc})"


COMPARE_WIDTH = 100
"""Characters a ``runs compare`` line may take: the knobs wrap, the table's run columns
continue below when they do not fit."""


def _compare(args: argparse.Namespace) -> int:
    with Store(args.db, read_only=True) as store:
        ids = [store.resolve_run(r) for r in args.runs]
        frame = runs_mod.compare_frame(store, ids)
    knobs = frame.loc["knobs"]
    body = frame.drop(index="knobs")
    # A run without a number in a cell (the asap-home run has no saving against itself, an
    # old run no attribution) says why in a note, not in the cell.
    notes: dict[str, list[str]] = {}
    for col in body.columns:
        for v in body[col]:
            if isinstance(v, str) and v not in notes.setdefault(col, []):
                notes[col].append(v)
    notes = {col: texts for col, texts in notes.items() if texts}
    if args.json:
        rows = {str(idx).strip(): {str(c): (None if isinstance(v, str) or (
            isinstance(v, float) and not math.isfinite(v)) else v) for c, v in row.items()}
            for idx, row in body.iterrows()}
        obj = {"runs": ids, "knobs": {str(c): str(v) for c, v in knobs.items()},
               "rows": rows, "notes": {c: "; ".join(t) for c, t in notes.items()}}
        print(json.dumps(obj, default=str))
        return 0
    print("runs compared:")
    for col, text in knobs.items():
        print(textwrap.fill(f"{col}: {text}", width=COMPARE_WIDTH, initial_indent="  ",
                            subsequent_indent="      "))
    numbered = list(dict.fromkeys(t for texts in notes.values() for t in texts))
    shown = body.map(lambda v: f"n/a ({numbered.index(v) + 1})" if isinstance(v, str)
                     else _num(v))
    print(shown.to_string(line_width=COMPARE_WIDTH))
    for i, text in enumerate(numbered, 1):
        who = ", ".join(c for c, texts in notes.items() if text in texts)
        print(textwrap.fill(f"({i}) {who}: {text}", width=COMPARE_WIDTH,
                            subsequent_indent="    "))
    return 0


def _export(args: argparse.Namespace) -> int:
    bad_output = check_outputs([("--out", args.out), ("--migrations-out", args.migrations_out),
                                ("--sites-out", args.sites_out)], args.db)
    if bad_output:
        return fail(bad_output)
    with Store(args.db, read_only=True) as store:
        rid = store.resolve_run(args.run)
        scenario = None
        if args.sites_out is not None:
            sc = _scenario(store, str(store.run_info(rid)["scenario"]))
            if isinstance(sc, str):
                return fail(f"--sites-out: {sc}")
            scenario = sc
        result = runs_mod.load_result(store, rid, scenario)
    write_plan_csv(result.plan, args.out)
    if args.migrations_out is not None:
        write_migrations_csv(result.migrations, args.migrations_out)
    if args.sites_out is not None:
        from workbench.bill import has_meter

        assert scenario is not None
        names = [d.name for d in scenario.datacenters]
        if not has_meter(result.slots, names):
            return fail(f"--sites-out: run {rid} has no slot records to meter (stored "
                        "without them)")
        write_sites_csv(result.slots, names, args.sites_out)
    if args.json:
        print(json.dumps({"run_id": rid, "plan": str(args.out), "plan_rows": len(result.plan),
                          "migrations": None if args.migrations_out is None
                          else str(args.migrations_out),
                          "sites": None if args.sites_out is None else str(args.sites_out)}))
    else:
        print(f"run {rid}: {len(result.plan):,d} plan rows written to {args.out}"
              + (f", {len(result.migrations):,d} migrations to {args.migrations_out}"
                 if args.migrations_out is not None else "")
              + (f", sites to {args.sites_out}" if args.sites_out is not None else ""))
    return 0


def _rename(args: argparse.Namespace) -> int:
    with Store(args.db) as store:
        rid = store.resolve_run(args.run)
        store.rename_run(rid, args.name)
    print(f"run {rid} named {args.name!r}" if args.name.strip() else f"run {rid} unnamed")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with Store(args.db) as store:
        ids = [store.resolve_run(r) for r in args.runs]
        for rid in dict.fromkeys(ids):
            store.delete_run(rid)
    if args.json:
        print(json.dumps({"deleted": list(dict.fromkeys(ids))}))
    else:
        print(f"deleted {len(set(ids))} run(s): {', '.join(dict.fromkeys(ids))}")
    return 0


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for rec in frame.to_dict("records"):
        row = {}
        for k, v in rec.items():
            if isinstance(v, pd.Timestamp):
                v = v.isoformat()
            elif hasattr(v, "item"):
                v = v.item()
            if isinstance(v, float) and not math.isfinite(v):
                v = None
            row[k] = v
        out.append(row)
    return out


def _job_set_records(jobs: pd.DataFrame) -> list[dict[str, Any]]:
    """:func:`_records` of the job sets; a relative trace's arrivals (imported without
    ``--start``) as hours after its start (``*_arrival_h_after_trace_start``, the ``*_utc``
    keys None), an absolute set's as UTC times (the ``*_h_after_trace_start`` keys None)."""
    out = []
    for row in _records(jobs):
        relative = trace_relative(row["first_arrival_utc"])
        for end in ("first", "last"):
            t = row[f"{end}_arrival_utc"]
            row[f"{end}_arrival_h_after_trace_start"] = \
                round(hours_after_trace_start(t), 4) if relative else None
            if relative:
                row[f"{end}_arrival_utc"] = None
        out.append(row)
    return out


def _data_list(args: argparse.Namespace) -> int:
    with Store(args.db, read_only=True) as store:
        series = store.series_summary()
        jobs = store.job_sets()
        profiles = store.profile_summary()
        scenarios = store.scenario_names()
    if args.json:
        print(json.dumps({"series": _records(series), "job_sets": _job_set_records(jobs),
                          "profiles": _records(profiles), "scenarios": scenarios}))
        return 0
    print(f"grid series in {args.db}:" if len(series) else f"grid series in {args.db}: none")
    for r in series.itertuples():
        print(f"  {r.region:<12}{r.kind:<8}{r.unit:<11}{r.first_utc:%Y-%m-%d %H:%M} .. "
              f"{r.last_utc:%Y-%m-%d %H:%M} UTC {r.rows:>8,d} rows  {r.source or ''}")
    print("job sets:" if len(jobs) else "job sets: none")
    for r in jobs.itertuples():
        what = "scenario" if r.is_scenario else "job set"
        print(f"  {r.name:<20}{what:<9}{r.jobs:>6,d} jobs ({r.training:,d} training, "
              f"{r.inference:,d} inference), arrivals "
              f"{arrival_span(r.first_arrival_utc, r.last_arrival_utc)}")
    print("profiles:" if len(profiles) else "profiles: none")
    for r in profiles.itertuples():
        print(f"  {r.app:<16}{r.gpu_type:<12}{'derived' if r.derived else 'fitted':<9}"
              f"{r.source or ''}")
    return 0
