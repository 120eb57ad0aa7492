"""The lines that state a run's bill, its saving against a reference and where the saving
comes from, as ``plan`` and ``runs show`` print them (one wording for both)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from typing import Any

from workbench.bill import BILL_PARTS, CREDITS
from workbench.equal_work import EQUAL_WORK_BASIS, LikeForLike
from workbench.metrics import ATTRIBUTION_KEYS, LEVER_ATTRIBUTION_KEYS
from workbench.runner import BASELINE


def attribution_lines(att: dict[str, Any] | None, bound: dict[str, Any] | None,
                      cur: str, cmp: LikeForLike | None = None) -> list[str]:
    """The summary lines of a run's saving attribution and hindsight bound (plan, runs show).

    With ``cmp`` (:func:`workbench.equal_work.like_for_like`) the split ends with the work
    left undone (the difference of the two runs' charges), so the parts add up to the
    saving on equal work; the bound is given on equal work with the run's gap to it."""
    lines = []
    undone, undone_kg = (math.nan, math.nan) if cmp is None else (
        cmp.baseline_unfinished_charge - cmp.unfinished_charge,
        cmp.baseline_unfinished_carbon_kg - cmp.unfinished_carbon_kg)
    if att:
        # The green levers' parts only where a run has them.
        keys = [*ATTRIBUTION_KEYS, *(k for k in LEVER_ATTRIBUTION_KEYS
                                     if abs(att["cost"].get(k, 0.0)) > 0)]
        parts = ", ".join(f"{k} {att['cost'].get(k, 0.0):+,.2f}" for k in keys)
        kg = ", ".join(f"{k} {att['carbon_kg'].get(k, 0.0):+,.1f}" for k in keys
                       if k in att["carbon_kg"])
        # Each unit's undone part on its own: a figure missing from one (NaN) must not
        # print as "+nan", nor hide the other's.
        if math.isfinite(undone) and abs(undone) > 0:
            parts += f", work left undone {undone:+,.2f}"
        if math.isfinite(undone_kg) and abs(undone_kg) > 0:
            kg += f", work left undone {undone_kg:+,.1f}"
        lines += [f"where the saving comes from ({cur}): {parts}",
                  f"where the carbon saving comes from (kg): {kg}"]
    if bound:
        cost, kg_b = bound.get("equal_work_cost"), bound.get("equal_work_carbon_kg")
        basis = "on equal work"
        if cost is None:  # stored before the equal-work figures
            cost, kg_b, basis = bound.get("cost"), bound.get("carbon_kg"), "work as planned"
        gap = "" if cmp is None or not math.isfinite(cmp.above_bound_pct) else (
            f"; this run is {cmp.above_bound_pct:+.1f}% above it")
        lines.append(f"hindsight bound ({bound.get('kind')}, {basis}): "
                     f"{'-' if cost is None else format(cost, ',.2f')} {cur}, "
                     f"{'-' if kg_b is None else format(kg_b, ',.1f')} kg CO2 (no restarts or "
                     f"transfers: a lower bound on every plan){gap}")
    return lines


def saving_lines(cmp: LikeForLike, run: Mapping[str, Any], base: Mapping[str, Any],
                 cur: str) -> list[str]:
    """The saving against asap-home, on equal work first (plan, runs show): one line when
    the bills compare like for like, else the equal-work saving, what was charged, and the
    bill's own saving marked as not like for like."""
    if not math.isfinite(cmp.saving):
        if not math.isfinite(cmp.bill_saving):
            return []
        return [f"saving against {BASELINE}: {cmp.bill_saving_pct:.1f}% of the electricity "
                f"bill ({cmp.bill_saving:,.2f} {cur}){saving_caveat(run, base)} (equal-work "
                "figures not stored with this run)"]
    lines = textwrap.wrap(
        f"saving against {BASELINE} on equal work: {cmp.saving:,.2f} {cur}, "
        f"{cmp.saving_pct:.1f}% of the bill and {cmp.jobs_saving_pct:.1f}% of its "
        f"controllable part (the bill less what the sites pay running no job); carbon "
        f"{cmp.carbon_saving_kg:,.1f} kg, {cmp.carbon_saving_pct:.1f}% and "
        f"{cmp.jobs_carbon_saving_pct:.1f}%", width=96, subsequent_indent="  ")
    lines += jct_lines(cmp, BASELINE)
    charged = cmp.unfinished_charge or cmp.baseline_unfinished_charge
    if not charged and cmp.like_for_like_bill:
        return lines + ["  (both runs did all the work: it is the bill's own saving)"]
    if charged:
        lines += textwrap.wrap(
            f"({EQUAL_WORK_BASIS}: {cmp.unfinished_charge:,.2f} {cur} for "
            f"{_num(run.get('unfinished_work_jobs'), 1)} jobs' worth in this run, "
            f"{cmp.baseline_unfinished_charge:,.2f} {cur} in {BASELINE})",
            width=96, subsequent_indent="  ")
    lines += textwrap.wrap(f"the bill alone: {cmp.bill_saving_pct:.1f}% lower "
                           f"({cmp.bill_saving:,.2f} {cur}){saving_caveat(run, base)}",
                           width=96, subsequent_indent="  ")
    return lines


def jct_lines(cmp: LikeForLike, against: str) -> list[str]:
    """What a saving costs in time, beside it: the mean and p95 completion times of the
    finished training jobs against ``against``'s, and their changes (nothing when either
    run finished none)."""
    parts = []
    for what, mine, theirs, pct in (
            ("mean", cmp.mean_jct_h, cmp.baseline_mean_jct_h, cmp.mean_jct_change_pct),
            ("p95", cmp.p95_jct_h, cmp.baseline_p95_jct_h, cmp.p95_jct_change_pct)):
        if math.isfinite(mine) and math.isfinite(theirs):
            parts.append(f"{what} JCT {theirs:,.1f} -> {mine:,.1f} h"
                         + (f" ({pct:+.1f}%)" if math.isfinite(pct) else ""))
    return textwrap.wrap(f"what it costs in time against {against}: {', '.join(parts)}",
                         width=96, subsequent_indent="  ") if parts else []


def _num(value: Any, digits: int) -> str:
    return "-" if not isinstance(value, int | float) or not math.isfinite(value) else (
        f"{value:,.{digits}f}")


def bill_lines(run: Mapping[str, Any], base: Mapping[str, Any] | None, note: str,
               cur: str) -> list[str]:
    """The summary lines of the bill and the supply (nothing for a run without either)."""
    bill = run.get("bill") or {}
    if bill.get("total") is None:
        return []
    lines = textwrap.wrap(f"bill ({cur}): {bill_text(bill)}", width=96,
                          subsequent_indent="  ")
    if note:
        lines.append(note)
    if run.get("green_share"):
        lines.append(f"green share {100 * run['green_share']:.1f}% of the energy taken in"
                     + (f" (against {100 * (base.get('green_share') or 0):.1f}% in {BASELINE})"
                        if base else "")
                     + f"; {run.get('curtailed_kwh') or 0:,.1f} kWh curtailed")
    return lines


def bill_text(bill: Mapping[str, Any]) -> str:
    """A bill's parts in one line: ``energy 1.00 + ppa ... = total; running no job ...``
    (parts that are 0 left out; the export credit subtracted)."""
    terms = []
    for part in BILL_PARTS:
        value = float(bill.get(part) or 0.0)
        if part == "energy" or abs(value) > 0:
            sign = "-" if part in CREDITS else "+"
            terms.append(f"{sign} {part.replace('_', ' ')} {value:,.2f}")
    text = " ".join(terms).removeprefix("+ ") + f" = {float(bill['total']):,.2f}"
    if bill.get("no_jobs_total") is not None:
        text += (f"; the sites running no job would pay {float(bill['no_jobs_total']):,.2f}, "
                 f"so the plan controls {float(bill['total']) - float(bill['no_jobs_total']):,.2f}")
    return text


def bill_json(m: Mapping[str, Any]) -> dict[str, Any]:
    """``plan --json``'s ``bill`` of a run's metrics: its parts (:data:`BILL_PARTS`),
    ``total`` and ``no_jobs_total`` (None for a run without its meter)."""
    return {**{p: m.get(f"bill_{p}") for p in BILL_PARTS}, "total": m.get("bill_total"),
            "no_jobs_total": m.get("bill_no_jobs_total")}


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else 0


def saving_caveat(run: Mapping[str, Any], base: Mapping[str, Any] | None) -> str:
    """What to append to a bill's saving against asap-home that is not like for like, or
    ``""``: the run left more jobs unfinished than asap-home did (their remaining work is not
    in the bill, so it looks cheaper) or missed more deadlines (plan, runs show)."""
    if not base:
        return ""
    parts = []
    n, n_base = _count(run.get("jobs_unfinished")), _count(base.get("jobs_unfinished"))
    if n > n_base:
        parts.append(f"{n} job{'s' if n != 1 else ''} unfinished"
                     + (f" against {n_base} in {BASELINE}" if n_base else "")
                     + " (their remaining work is not in the bill)")
    m, m_base = _count(run.get("deadline_misses")), _count(base.get("deadline_misses"))
    if m > m_base:
        parts.append(f"{m} deadline miss{'es' if m != 1 else ''} against {m_base} in "
                     f"{BASELINE}")
    return " — not like for like: " + "; ".join(parts) if parts else ""
