"""Stored runs as objects an operator finds, reads and compares (the CLI's ``runs`` and the
app's Runs view share these).

A run in the store (:meth:`workbench.store.Store.save_run`) keeps its plan, migrations,
per-slot records, metrics, knobs and simulator settings. :func:`load_result` turns it back
into a :class:`workbench.sim.RunResult` (without the policy's queue trace and per-job
outcome table, which are not stored); :func:`knobs_text` says in one line what made it;
:func:`differs_only_in` tells whether two runs differ in one knob alone (the V trade-off
joins only those); :func:`compare_frame` puts runs side by side;
:func:`stored_attribution` splits a stored run's saving against its stored asap-home
comparison (:func:`workbench.metrics.attribute_savings`) as it was right after the run.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from workbench.bill import bill_metrics, has_meter
from workbench.caps import Caps
from workbench.equal_work import EQUAL_WORK_KEYS, bound_equal_work, equal_work
from workbench.metrics import ATTRIBUTION_KEYS, LEVER_ATTRIBUTION_KEYS, attribute_savings
from workbench.model import Scenario, ScenarioError
from workbench.schema import MIGRATION, PLAN_ROW
from workbench.store import RUN_SETTINGS, RUN_SUMMARY_METRICS, Store, StoreError

if TYPE_CHECKING:  # the simulator, the cubes and the scenarios load where used: `runs list`
    from workbench.sim import RunResult  # starts without them

REFERENCE_POLICY = "asap-home"
"""The policy a saving is measured against (run at once, at home)."""

SAME_SETTINGS: tuple[str, ...] = ("slot_s", "n_slots", "forecast_mode", "forecast_error")
"""Simulator settings two runs must share for one to be the other's comparison run."""

ATTRIBUTION_BEFORE_V6 = ("attribution not available for runs stored before schema version "
                         "6 (their plan rows lack the movement kWh); run the policy again "
                         "to see it")
"""Why a run stored by an older workbench has no attribution."""

COMPARE_METRICS: tuple[tuple[str, str], ...] = (
    ("bill_total", "bill ({c})"), ("cost", "  the plan's part ({c})"),
    ("equal_work_cost", "  the plan's part on equal work ({c})"),
    ("unfinished_charge", "    of which work left undone ({c})"),
    ("carbon_kg", "carbon, the plan's part (kg CO2)"), ("energy_kwh", "jobs' energy (kWh)"),
    ("mean_jct_h", "mean JCT (h)"), ("p95_jct_h", "p95 JCT (h)"),
    ("deadline_misses", "deadline misses"), ("jobs_unfinished", "jobs unfinished"),
    ("migrations", "migrations"), ("energy_moved_kwh", "energy that moved (kWh)"),
)
"""Metrics of :func:`compare_frame`: key and label (``{c}``: the currency). The bill is what
the sites pay (:mod:`workbench.bill`), the plan's part of it the bill less what the same
sites pay running no job; on equal work it charges the training work a run left undone
(:mod:`workbench.equal_work`)."""

INT_METRICS = frozenset({"deadline_misses", "jobs_unfinished", "migrations", "jobs_total",
                         "jobs_finished", "inference_services", "inference_unserved_slots",
                         "data_moves", "round_trips", "fallbacks", "power_cap_violations"})
"""Metrics that count things: shown as integers (as :func:`workbench.metrics.compute_metrics`
gives them; the store keeps every number as a DOUBLE)."""

FLAG_METRICS = frozenset({"carbon_cap_met"})
"""Metrics that are yes or no: shown as booleans."""


def typed_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A stored run's metrics with the types the run gave them back: :data:`INT_METRICS`
    as int, :data:`FLAG_METRICS` as bool (NaN and inf are left as they are)."""
    out = dict(metrics)
    for key, value in metrics.items():
        if not isinstance(value, float) or not math.isfinite(value):
            continue
        if key in INT_METRICS:
            out[key] = int(value)
        elif key in FLAG_METRICS:
            out[key] = bool(value)
    return out


def fill_equal_work(metrics: MutableMapping[str, Any], plan: pd.DataFrame,
                    scenario: Scenario) -> None:
    """Give a stored run's ``metrics`` its equal-work figures
    (:func:`workbench.equal_work.equal_work`) when it was stored before they existed."""
    if all(k in metrics for k in EQUAL_WORK_KEYS) or "cost" not in metrics:
        return
    metrics.update(equal_work(plan, scenario, float(metrics["cost"]),
                              float(metrics.get("carbon_kg", math.nan))))


METER_REPLAYED = ("stored before the site meter: its meter and bill are recomputed from its "
                  "stored slot records (each site's jobs' energy and battery flows)")
"""What a run stored before the site meter says about its bill (``meter_note``)."""


def replay_meter(scenario: Scenario, slots: pd.DataFrame) -> pd.DataFrame:
    """The slot records of a run stored before the site meter with the meter's columns
    (:data:`workbench.schema.SITE_SLOT`) recomputed: each slot's jobs' energy per
    datacenter (``energy_kwh:<dc>``) and battery flows (``discharge_kwh:<dc>`` less
    ``charge_kwh:<dc>``, as the planner's decision) through :class:`workbench.meter.Meter`
    at the scenario's true prices. A frame without those records comes back as it is."""
    from workbench.meter import Meter
    from workbench.sim.truth import horizon_cube

    names = [d.name for d in scenario.datacenters]
    if not len(slots) or has_meter(slots, names) or f"energy_kwh:{names[0]}" not in slots:
        return slots
    cube = horizon_cube(scenario)
    meter = Meter(scenario, np.asarray(cube["price_per_kwh"].values, dtype=float),
                  np.asarray(cube["carbon_g_per_kwh"].values, dtype=float),
                  {str(r): i for i, r in enumerate(cube["region"].values)})
    h = scenario.slot_s / 3600.0
    rows = []
    for t, rec in enumerate(slots.to_dict("records")):
        jobs = {n: float(rec.get(f"energy_kwh:{n}", 0.0) or 0.0) for n in names}
        battery = {b.datacenter: (float(rec.get(f"discharge_kwh:{b.datacenter}", 0.0) or 0.0)
                                  - float(rec.get(f"charge_kwh:{b.datacenter}", 0.0) or 0.0))
                   / h for b in scenario.supply.batteries}
        slot = meter.read(min(t, scenario.n_slots - 1), jobs, battery)
        cols = meter.columns(min(t, scenario.n_slots - 1), slot)
        for n in names:
            cols[f"cost:{n}"], cols[f"carbon_kg:{n}"] = slot.controllable(n)
        cols["cost"] = sum(cols[f"cost:{n}"] for n in names)
        cols["carbon_kg"] = sum(cols[f"carbon_kg:{n}"] for n in names)
        rows.append(cols)
    extra = pd.DataFrame(rows, index=slots.index)
    return pd.concat([slots.drop(columns=[c for c in extra.columns if c in slots]), extra],
                     axis=1)


def fill_meter(metrics: MutableMapping[str, Any], plan: pd.DataFrame, slots: pd.DataFrame,
               scenario: Scenario) -> pd.DataFrame:
    """Give a run stored before the site meter its bill (:func:`replay_meter`,
    :func:`workbench.bill.bill_metrics`, its equal-work figures again on the new ``cost``)
    and a ``meter_note`` saying so; returns its slot records with the meter's columns. A
    run stored since the meter is left as it is."""
    names = [d.name for d in scenario.datacenters]
    if has_meter(slots, names) or not len(slots):
        return slots
    slots = replay_meter(scenario, slots)
    if not has_meter(slots, names):
        return slots
    metrics.update(bill_metrics(plan, slots, scenario))
    metrics.update(equal_work(plan, scenario, float(metrics["cost"]),
                              float(metrics["carbon_kg"])))
    metrics["meter_note"] = METER_REPLAYED
    return slots


def stored_metrics(store: Store, run_id: str, scenario: Scenario | None = None
                   ) -> dict[str, Any]:
    """A stored run's metrics, typed (:func:`typed_metrics`); with ``scenario``, a run
    stored before the site meter billed again from its slot records (:func:`fill_meter`)
    and one stored before the equal-work figures given them from its plan."""
    metrics = typed_metrics(store.run_metrics(run_id))
    if scenario is not None and "bill_no_jobs_total" not in metrics:
        fill_meter(metrics, store.run_plan(run_id), store.run_slots(run_id),
                   at_slot(scenario, _slot_s(store, run_id)))
    if scenario is not None and not all(k in metrics for k in EQUAL_WORK_KEYS):
        fill_equal_work(metrics, store.run_plan(run_id), scenario)
    return metrics


def run_scenario_of(store: Store, run_id: str) -> Scenario:
    """The scenario a stored run ran on (stored, else the built-in of its name), at the
    run's slot length. Raises StoreError, ScenarioError or KeyError when it cannot be
    loaded."""
    from workbench.scenarios import stored_or_builtin

    info = store.run_info(run_id)
    return at_slot(stored_or_builtin(store, str(info["scenario"])), _slot_s(store, run_id))


def _slot_s(store: Store, run_id: str) -> int | None:
    got = run_settings(store.run_info(run_id)).get("slot_s")
    return int(got) if got else None


def with_equal_work_bound(bound: Mapping[str, Any] | None, scenario: Scenario | None,
                          slot_s: Any = None) -> dict[str, Any] | None:
    """A stored hindsight bound with its equal-work figures
    (:func:`workbench.equal_work.bound_equal_work`, computed on ``scenario`` at ``slot_s``
    for one stored before them); None without a bound."""
    if not bound:
        return None
    out = dict(bound)
    if "equal_work_cost" not in out and scenario is not None:
        try:
            sc = at_slot(scenario, int(slot_s) if slot_s else None)
        except ScenarioError:
            return out
        out.update(bound_equal_work(out, sc))
    return out


def _parse(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if not value or (isinstance(value, float) and math.isnan(value)):
        return {}
    try:
        out = json.loads(str(value))
    except ValueError:
        return {}
    return dict(out) if isinstance(out, Mapping) else {}


def run_settings(info: Mapping[str, Any]) -> dict[str, Any]:
    """What made a run besides its policy: knobs merged with the simulator's settings.

    ``info`` is a row of :meth:`Store.run_summaries` or :meth:`Store.run_info`. A run from a
    store older than schema 5 has no settings: only its knobs come back.
    """
    knobs = _parse(info.get("knobs"))
    settings = _parse(info.get("settings"))
    return {**settings, **knobs}


def _kg(value: Any) -> str:
    """A cap in kg as written in knob lines: whole kg from 10 up, else three digits (a
    0.4 kg cap is not "0 kg")."""
    v = float(value)
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.3g}"


def knobs_text(info: Mapping[str, Any]) -> str:
    """One line saying what made a run: policy, V, caps, grid events, GPU menu, forecast and
    slot."""
    k = run_settings(info)
    parts = [str(info.get("policy", "?"))]
    if "V" in k:
        parts.append(f"V={float(k['V']):g}")
    cap = k.get("carbon_cap_kg")
    if isinstance(cap, Mapping):
        parts.append("carbon caps " + ", ".join(f"{dc} {_kg(v)} kg"
                                                for dc, v in sorted(cap.items())))
    elif cap is not None:
        parts.append(f"carbon cap {_kg(cap)} kg")
    if k.get("power_cap_kw") is not None:
        parts.append(f"power cap {float(k['power_cap_kw']):,.0f} kW")
    events = k.get("grid_events") or []
    if events:
        parts.append(f"{len(events)} grid event{'s' if len(events) > 1 else ''}")
    if "migration_threshold" in k:
        parts.append(f"migration threshold {float(k['migration_threshold']):g}")
    if k.get("gpu_counts"):
        parts.append("GPUs " + "/".join(str(int(n)) for n in k["gpu_counts"]))
    mode = k.get("forecast_mode")
    if mode:
        err = float(k.get("forecast_error") or 0.0)
        revise = {"band": "revised beyond its band", "none": "as issued",
                  "always": "revised every slot"}.get(str(k.get("forecast_revise")), "")
        model = (f" ({k['forecast_model']}{', ' + revise if revise else ''})"
                 if mode == "model" and k.get("forecast_model") else "")
        parts.append(f"forecast {mode}" + (f" ±{err:.0%}" if mode == "noisy" and err else "")
                     + model)
    if k.get("slot_s"):
        parts.append(f"slot {int(k['slot_s']) // 60} min")
    if k.get("noise"):
        parts.append(f"noise {float(k['noise']):g}")
    return " · ".join(parts)


def differs_only_in(a: Mapping[str, Any], b: Mapping[str, Any], knob: str = "V") -> bool:
    """True when runs ``a`` and ``b`` have the same policy and scenario and the same knobs and
    settings except ``knob`` (the V trade-off joins only such runs)."""
    if a.get("policy") != b.get("policy") or a.get("scenario") != b.get("scenario"):
        return False
    ka = {k: v for k, v in run_settings(a).items() if k != knob}
    kb = {k: v for k, v in run_settings(b).items() if k != knob}
    return json.dumps(ka, sort_keys=True, default=str) == json.dumps(kb, sort_keys=True,
                                                                      default=str)


def label(info: Mapping[str, Any]) -> str:
    """A run's short label: its name if it has one, else policy and id."""
    name = info.get("name")
    if isinstance(name, str) and name:
        return name
    return f"{info.get('policy', '?')} {str(info.get('run_id', ''))[:6]}"


def load_result(store: Store, run_id: str, scenario: Scenario | None = None) -> RunResult:
    """A stored run as a :class:`RunResult` (``queues`` and ``jobs`` empty: not stored).

    With ``scenario`` the plan rows get each job's ``kind`` back (the Gantt filters by it).
    """
    info = store.run_info(run_id)
    settings = run_settings(info)
    plan = store.run_plan(run_id)
    for col in PLAN_ROW.names_of("time"):  # the store keeps naive UTC
        plan[col] = pd.to_datetime(plan[col], utc=True)
    if scenario is not None:
        kinds = {j.job_id: j.kind for j in scenario.jobs}
        plan["kind"] = plan["job_id"].map(kinds)
    migrations = store.run_migrations(run_id)
    for col in MIGRATION.names_of("time"):
        migrations[col] = pd.to_datetime(migrations[col], utc=True)
    metrics = store.run_metrics(run_id)
    meta: dict[str, Any] = {
        **{k: v for k, v in _parse(info.get("settings")).items()},
        "scenario": info["scenario"], "policy": info["policy"],
        "knobs": _parse(info.get("knobs")), "status": info.get("status"),
        "log": info.get("log") or "", "run_id": run_id, "name": info.get("name"),
        "created_utc": info.get("created_utc"),
    }
    meta.setdefault("slot_s", settings.get("slot_s"))
    if info.get("bound"):
        meta["bound"] = dict(info["bound"])
    if info.get("baseline_run_id"):
        meta["baseline_run_id"] = info["baseline_run_id"]
    if "currency" in metrics:
        meta["currency"] = metrics["currency"]
    warnings = [w for w in str(info.get("log") or "").splitlines() if w.strip()]
    from workbench.sim import RunResult

    slots = store.run_slots(run_id)
    if scenario is not None and "bill_no_jobs_total" not in metrics:
        metrics = typed_metrics(metrics)
        slots = fill_meter(metrics, plan, slots, at_slot(scenario, settings.get("slot_s")))
    return RunResult(meta=meta, plan=plan, migrations=migrations, slots=slots,
                     queues=pd.DataFrame(), jobs=pd.DataFrame(), metrics=metrics,
                     warnings=warnings)


def at_slot(scenario: Scenario, slot_s: int | None) -> Scenario:
    """``scenario`` at slot length ``slot_s`` seconds (its grid cube resampled; itself when
    ``slot_s`` is None or already its own). Raises :class:`ScenarioError` when the horizon is
    not a whole number of such slots."""
    if not slot_s or int(slot_s) == scenario.slot_s:
        return scenario
    slot_s = int(slot_s)
    horizon_s = scenario.slot_s * scenario.n_slots
    if horizon_s % slot_s:
        raise ScenarioError(f"the horizon ({horizon_s / 3600:g} h) is not a whole number of "
                            f"{slot_s // 60}-min slots; pick another slot length")
    from workbench.cubes import resample

    return dataclasses.replace(scenario, grid=resample(scenario.grid, slot_s), slot_s=slot_s,
                               n_slots=horizon_s // slot_s)


def same_settings(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """True when runs ``a`` and ``b`` (rows of :meth:`Store.run_summaries` or
    :meth:`Store.run_info`) share the :data:`SAME_SETTINGS` and were metered against the
    same power caps (a saving measured under another cap on the grid connection is not the
    same comparison)."""
    sa, sb = run_settings(a), run_settings(b)
    return all(sa.get(k) == sb.get(k) for k in SAME_SETTINGS) and _power_caps(a) == \
        _power_caps(b)


def _power_caps(info: Mapping[str, Any]) -> Caps:
    try:
        return Caps.from_stored(_parse(info.get("knobs"))).metered()
    except ValueError:
        return Caps()


def reference_run(store: Store, info: Mapping[str, Any]) -> str | None:
    """The stored asap-home run a run's saving is measured against: the one recorded with
    it (``baseline_run_id``, schema 6), else the newest asap-home run of the same scenario
    and :data:`SAME_SETTINGS`; None when none is stored."""
    recorded = info.get("baseline_run_id")
    if recorded and store.run_ids(str(recorded)) == [recorded]:
        return str(recorded)
    table = store.run_summaries(str(info["scenario"]))
    for rec in table.to_dict("records"):  # newest first
        if rec["policy"] == REFERENCE_POLICY and rec["run_id"] != info.get("run_id") \
                and same_settings(rec, info):
            return str(rec["run_id"])
    return None


def stored_baseline(store: Store, scenario: str, key: str) -> str | None:
    """The newest stored baseline run of ``scenario`` whose settings carry ``key``
    (:func:`workbench.runner.spec_key`: the same scenario content and run settings), or
    None: ``plan`` reuses it instead of storing another identical baseline."""
    runs = store.runs(scenario)
    for rec in reversed(runs.to_dict("records")):  # newest last in runs()
        if rec.get("status") == "baseline" and _parse(rec.get("settings")).get("spec_key") \
                == key:
            return str(rec["run_id"])
    return None


def stored_attribution(store: Store, run_id: str, scenario: Scenario,
                       result: RunResult | None = None
                       ) -> tuple[dict[str, dict[str, float]] | None, str]:
    """Where a stored run's saving against its asap-home comparison comes from.

    ``scenario`` is the run's scenario (at any slot length: it is brought to the run's).
    ``result``, the run as :func:`load_result` gave it, saves a second read. Returns
    ``(attribution, "")`` as :func:`workbench.metrics.attribute_savings` gives it, or
    ``(None, why)`` when it cannot be computed (no comparison stored, or a run stored
    before schema 6, :data:`ATTRIBUTION_BEFORE_V6`).
    """
    info = {**store.run_info(run_id), "run_id": run_id}
    if info["policy"] == REFERENCE_POLICY:
        return None, f"this is the {REFERENCE_POLICY} run savings are measured against"
    ref = reference_run(store, info)
    if ref is None:
        return None, (f"no {REFERENCE_POLICY} run with the same slot and forecast is stored "
                      "to measure the saving against")
    res = result if result is not None else load_result(store, run_id)
    base = store.run_plan(ref)
    for plan in (res.plan, base):
        if "movement_kwh" not in plan or plan["movement_kwh"].isna().any():
            return None, ATTRIBUTION_BEFORE_V6
    for col in ("slot_start", "slot_end"):
        base[col] = pd.to_datetime(base[col], utc=True)
    try:
        sc = at_slot(scenario, run_settings(info).get("slot_s"))
    except ScenarioError as exc:
        return None, f"attribution not available: {exc}"
    return attribute_savings(res, {"plan": base, "metrics": store.run_metrics(ref)}, sc), ""


def _scenario_of(store: Store, name: str, cache: MutableMapping[str, Scenario | str]
                 ) -> Scenario | str:
    """The stored scenario ``name`` (else the built-in of that name, generated in memory;
    cached in ``cache``), or why it cannot be loaded."""
    if name not in cache:
        try:
            from workbench.scenarios import stored_or_builtin

            cache[name] = stored_or_builtin(store, name)
        except (StoreError, ScenarioError, KeyError) as exc:
            cache[name] = f"attribution not available: scenario {name!r} cannot be loaded " \
                          f"({exc})"
    return cache[name]


ATTRIBUTION_ROWS: tuple[tuple[str, str], ...] = (
    ("cost", "saving against asap-home ({c})"),
    *((f"cost:{k}", f"  from {k} ({{c}})") for k in ATTRIBUTION_KEYS + LEVER_ATTRIBUTION_KEYS),
    ("carbon_kg", "carbon saved against asap-home (kg)"),
    *((f"carbon_kg:{k}", f"  from {k} (kg)")
      for k in ATTRIBUTION_KEYS + LEVER_ATTRIBUTION_KEYS[:2]),
)
"""Rows of :func:`compare_frame` that split each run's saving (key ``part:what``)."""


def attribution_values(att: Mapping[str, Mapping[str, float]] | None, why: str = ""
                       ) -> list[Any]:
    """One run's values for :data:`ATTRIBUTION_ROWS`: the totals and their parts, or the
    reason in the first row (None in the others) when there is no attribution."""
    if not att:
        return [why or "attribution not available", *([None] * (len(ATTRIBUTION_ROWS) - 1))]
    out: list[Any] = []
    for key, _ in ATTRIBUTION_ROWS:
        part, _, what = key.partition(":")
        out.append(float(att[part].get(what, 0.0)) if what
                   else float(sum(att[part].values())))
    return out


def compare_frame(store: Store, run_ids: Iterable[str],
                  scenarios: Mapping[str, Scenario] | None = None) -> pd.DataFrame:
    """Runs side by side: one row per metric of :data:`COMPARE_METRICS`, then where each
    run's saving against asap-home comes from (:data:`ATTRIBUTION_ROWS`,
    :func:`stored_attribution`), one column per run (labelled by :func:`label`), plus
    ``knobs`` as the first row.

    ``scenarios`` maps scenario names to loaded scenarios (others are read from the store).
    """
    columns: dict[str, list[Any]] = {}
    index = ["knobs"]
    currency = ""
    loaded: dict[str, Scenario | str] = dict(scenarios or {})
    for rid in run_ids:
        info = store.run_info(rid)
        sc = _scenario_of(store, str(info["scenario"]), loaded)
        metrics = stored_metrics(store, rid, None if isinstance(sc, str) else sc)
        currency = currency or str(metrics.get("currency", ""))
        values: list[Any] = [knobs_text(info)]
        for key, _ in COMPARE_METRICS:
            values.append(metrics.get(key))
        if isinstance(sc, str):
            values += attribution_values(None, sc)
        else:
            values += attribution_values(*stored_attribution(store, rid, sc))
        name = label({**info, "run_id": rid})
        while name in columns:
            name += "'"
        columns[name] = values
    index += [lbl.format(c=currency) for _, lbl in COMPARE_METRICS]
    index += [lbl.format(c=currency) for _, lbl in ATTRIBUTION_ROWS]
    return pd.DataFrame(columns, index=index)


def summary_rows(store: Store, scenario: str | None = None) -> list[dict[str, Any]]:
    """:meth:`Store.run_summaries` as plain records for JSON: counts as integers, NaN as
    None, times ISO, and ``knobs`` the one-line :func:`knobs_text`."""
    out = []
    for rec in store.run_summaries(scenario).to_dict("records"):
        row: dict[str, Any] = {
            "run_id": rec["run_id"], "name": rec["name"] if isinstance(rec["name"], str)
            else None, "created_utc": pd.Timestamp(rec["created_utc"]).isoformat(),
            "scenario": rec["scenario"], "policy": rec["policy"], "status": rec["status"],
            "knobs": knobs_text(rec), "settings": run_settings(rec),
            "currency": rec["currency"]}
        for key in RUN_SUMMARY_METRICS:
            v = rec.get(key)
            if v is None or (isinstance(v, float) and not math.isfinite(v)):
                row[key] = None
            else:
                row[key] = int(v) if key in INT_METRICS else float(v)
        out.append(row)
    return out


def stored_comparisons(store: Store, table: pd.DataFrame, info: Mapping[str, Any],
                       res: RunResult, policies: Sequence[str], scenario: Scenario | None
                       ) -> tuple[dict[str, dict[str, Any]], Mapping[str, Any] | None]:
    """A stored run's comparisons: the newest stored run of each of ``policies`` (not the
    run's own) with the same settings in ``table`` (:meth:`Store.run_summaries`, newest
    first), as ``policy -> metrics``; and its hindsight bound: its own, else its offline
    comparison's (None when neither has one)."""
    baselines: dict[str, dict[str, Any]] = {}
    bound = res.meta.get("bound")
    for rec in table.to_dict("records"):
        if (rec["policy"] in policies and rec["policy"] != res.policy
                and rec["policy"] not in baselines and same_settings(rec, info)):
            baselines[rec["policy"]] = stored_metrics(store, rec["run_id"], scenario)
            if rec["policy"] == "offline" and not bound:
                bound = store.run_info(rec["run_id"]).get("bound")
    return baselines, bound


def newest_scenario(store: Store) -> str | None:
    """The scenario of the newest stored run that is not a comparison run (else of the
    newest run at all); None when no run is stored."""
    runs = store.runs()
    if runs.empty:
        return None
    own = runs[runs["status"] != "baseline"]
    return str((own if len(own) else runs)["scenario"].iloc[-1])  # oldest first


def run_info_of(res: RunResult, run_id: str | None) -> dict[str, Any]:
    """A run just made, described as :meth:`Store.run_info` describes a stored one (run_id,
    name, created_utc, policy, scenario, knobs, settings, stored)."""
    meta = res.meta
    return {"run_id": run_id or meta.get("run_id"), "name": meta.get("name"),
            "created_utc": meta.get("created_utc") or pd.Timestamp.now("UTC"),
            "policy": res.policy, "scenario": meta.get("scenario"),
            "knobs": dict(meta.get("knobs") or {}),
            "settings": {k: meta[k] for k in RUN_SETTINGS if k in meta},
            "stored": run_id is not None or bool(meta.get("run_id"))}
