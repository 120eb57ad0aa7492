"""The app's HTML: every fragment the views put in an HTML pane, and the one escaping helper.

Every user-supplied string (scenario, datacenter, region, job, run and GPU names, currency,
descriptions, typed values, warnings, error messages, file names) that reaches HTML or
Markdown goes through :func:`esc` first.
"""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

from workbench import runs as stored_runs
from workbench.app.plots import bar_colors
from workbench.equal_work import LikeForLike

_MARKDOWN_SIGNS = str.maketrans({c: f"&#{ord(c)};" for c in "\\`*_[]~|$"})
"""Characters Markdown would read as markup, as numeric references (text in HTML too)."""


def esc(value: object) -> str:
    """``value`` as text, safe in an HTML or a Markdown pane: the one escaping helper.

    ``& < > " '`` become entities (no tag, no attribute, no script can start), and the
    characters Markdown reads as markup (``\\ ` * _ [ ] ~ | $``) numeric references, so a
    name shows as typed in either pane. Not for Markdown code spans (they show references
    as typed): put user text in ``<code>`` instead.
    """
    return html.escape(str(value), quote=True).translate(_MARKDOWN_SIGNS)


HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("bill_total", "Bill", "{:,.2f}"),
    ("cost", "The plan's part of it", "{:,.2f}"),
    ("carbon_kg", "Carbon, the plan's part (kg)", "{:,.1f}"),
    ("energy_kwh", "Energy (kWh)", "{:,.1f}"),
    ("mean_jct_h", "Mean JCT (h)", "{:,.2f}"),
    ("deadline_misses", "Deadline misses", "{:d}"),
    ("migrations", "Migrations", "{:d}"),
)
"""Headline metrics of the Metrics tab: key, label, format (element id ``metric-<key>``).
``bill_total`` is what the sites pay (:mod:`workbench.bill`), ``cost`` the part of it the
plan controls (the bill less what the same sites pay running no job)."""


def _fmt(fmt: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if "d}" in fmt:
        return fmt.format(int(value))
    return fmt.format(float(value))


def headline_html(metrics: dict[str, Any] | None, currency: str = "") -> str:
    """The headline metrics as HTML cards; each value sits in ``<span id="metric-KEY">``."""
    if not metrics:
        return '<div id="metrics-empty">No run yet: choose knobs and press <b>Run</b>.</div>'
    cards = []
    for key, label, fmt in HEADLINE:
        unit = f" {esc(currency)}" if key in ("bill_total", "cost") and currency else ""
        cards.append(
            f'<div class="wb-card" style="display:inline-block;margin:4px 12px 4px 0;'
            f'padding:6px 12px;border:1px solid #ddd;border-radius:6px">'
            f'<div style="font-size:11px;color:#666">{label}</div>'
            f'<div style="font-size:20px"><span id="metric-{key}">{_fmt(fmt, metrics.get(key))}'
            f"</span>{unit}</div></div>"
        )
    return '<div id="metrics-headline">' + "".join(cards) + "</div>"


def banner_html(info: dict[str, Any], running: bool, warnings: list[str], tz: str) -> str:
    """Which run the tab shows and what made it; a stale mark while a run goes; warnings."""
    if not info:
        return ""
    created = info.get("created_utc")
    when = ""
    if created is not None:
        stamp = pd.Timestamp(created)
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
        when = f", {stamp.tz_convert(tz):%Y-%m-%d %H:%M} {esc(tz)}"
    stored = (f"stored run <code>{esc(info.get('run_id'))}</code>" if info.get("run_id")
              else "not stored")
    name = f"<b>{esc(info['name'])}</b> · " if info.get("name") else ""
    out = (f'<div id="wb-run-banner" style="padding:4px 10px;border-left:4px solid #1f6f8b;'
           f'background:#f4f8fa;font-size:13px">{name}{esc(stored_runs.knobs_text(info))}'
           f'<span style="color:#666"> — {stored}{when}</span></div>')
    if running:
        out += ('<div id="wb-stale" style="padding:4px 10px;margin-top:4px;background:#fff3cd;'
                'border-left:4px solid #e0a800;font-size:13px"><b>Stale:</b> a new run is '
                'going; what follows is the run named above until it finishes.</div>')
    if warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in warnings[:8])
        more = f"<li>… {len(warnings) - 8} more</li>" if len(warnings) > 8 else ""
        out += ('<div id="wb-run-warnings" style="padding:4px 10px;margin-top:4px;'
                'background:#fdecea;border-left:4px solid #d93025;font-size:13px">'
                f"<b>Warnings of this run</b><ul style='margin:2px 0'>{items}{more}</ul></div>")
    return out


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def progress_html(rows: list[dict[str, Any]], now: float) -> str:
    """Per policy: a bar, the percentage and the time left (from this run's own pace; a
    policy not started yet is estimated at the pace of those before it)."""
    if not rows:
        return ""
    rates = [(r["finished_s"] or now) - r["started_s"] for r in rows
             if r["started_s"] is not None and r["done"] > 0]
    slots = [r["done"] for r in rows if r["started_s"] is not None and r["done"] > 0]
    per_slot = sum(rates) / sum(slots) if slots and sum(slots) else math.nan
    total_left = 0.0
    lines = []
    for r in rows:
        pct = 100.0 * r["done"] / max(r["total"], 1)
        if r["finished_s"] is not None or r["done"] >= r["total"]:
            state = f"done in {_duration((r['finished_s'] or now) - r['started_s'])}"
        elif r["started_s"] is None:
            left = per_slot * r["total"]
            total_left += 0 if math.isnan(left) else left
            state = f"waiting, ~{_duration(left)}"
        else:
            elapsed = now - r["started_s"]
            left = elapsed / r["done"] * (r["total"] - r["done"]) if r["done"] else math.nan
            total_left += 0 if math.isnan(left) else left
            state = f"{_duration(elapsed)} elapsed, ~{_duration(left)} left"
        lines.append(
            f'<tr><td style="padding-right:10px">{esc(r["policy"])}</td>'
            f'<td style="width:40%"><div style="background:#e6eef1;height:10px;border-radius:5px">'
            f'<div style="background:#1f6f8b;width:{pct:.0f}%;height:10px;border-radius:5px">'
            f'</div></div></td><td style="padding:0 10px" class="wb-pct">{pct:.0f} %</td>'
            f"<td>{state}</td></tr>")
    done = sum(r["done"] for r in rows)
    total = sum(r["total"] for r in rows)
    return (f'<div id="wb-progress"><b>Running: {100 * done / max(total, 1):.0f} % done, '
            f"about {_duration(total_left)} left</b> (estimates from this run's pace)"
            f'<table style="width:100%;font-size:13px">{"".join(lines)}</table></div>')



def stage_html(stage: str) -> str:
    """What the running computation is doing now, under the progress bars."""
    return f'<div style="color:#555;font-size:12px">{esc(stage)}</div>'


def caps_html(caps: list[dict[str, Any]], metrics: dict[str, Any] | None = None) -> str:
    """Every cap of a run as met or missed, beside its results.

    ``caps`` are the carbon caps (:func:`workbench.app.derive.cap_status`); ``metrics`` give
    the metered power-cap violations. Anything missed is a red warning
    (``id="metrics-cap-warning"``); caps all met are a quiet note (``id="metrics-cap-met"``).
    """
    missed = []
    for c in caps:
        if not c["met"]:
            where = "" if c["scope"] == "all" else f" in {esc(c['scope'])}"
            cap, kg = float(c["cap_kg"]), float(c["carbon_kg"])
            missed.append(f"<b>Carbon cap missed{where}:</b> {kg:,.1f} kg emitted against a cap "
                          f"of {cap:,.1f} kg ({100 * (kg - cap) / cap:+.1f} %).")
    n = int((metrics or {}).get("power_cap_violations", 0) or 0)
    if n:
        missed.append(f"<b>Power cap missed</b> in {n} datacenter-slot(s) (metered above "
                      f"{esc((metrics or {}).get('power_cap_kw'))} kW).")
    if missed:
        return ('<div id="metrics-cap-warning" style="font-size:15px;padding:6px 10px;'
                'border-left:4px solid #d62728;background:#fdecea">' + " ".join(missed)
                + "</div>")
    if caps:
        met = "; ".join(("all datacenters" if c["scope"] == "all" else esc(c["scope"]))
                        + f" {float(c['carbon_kg']):,.1f} of {float(c['cap_kg']):,.1f} kg"
                        for c in caps)
        return f'<div id="metrics-cap-met" style="padding:4px 10px">Carbon cap met: {met}.</div>'
    return ""


def savings_html(cmp: LikeForLike, policy: str, currency: str = "",
                 missing: dict[str, str] | None = None) -> str:
    """The run's savings as sentences, on equal work first
    (:func:`workbench.app.derive.run_comparison`); numbers sit in ``<span id="saving-KEY">``.

    ``missing`` says why a reference is absent (``asap-home``, ``bound``): the sidebar's
    state decides the words (selected but not run, or not selected).
    """
    missing = missing or {}
    cur = esc(currency)

    def pct(key: str, value: float, sign: str = "") -> str:
        text = "–" if not math.isfinite(value) else format(value, f"{sign}.1f") + " %"
        return f'<span id="saving-{key}">{text}</span>'

    parts: list[str] = []
    if math.isfinite(cmp.saving):
        parts.append(f"<b>{esc(policy)}</b> against asap-home (run at once, at home), "
                     f"<b>on equal work</b>: {cmp.saving:,.2f} {cur} saved, "
                     f"{pct('pct', cmp.saving_pct)} of the bill and "
                     f"{pct('jobs-pct', cmp.jobs_saving_pct)} of its part the plan controls "
                     f"(the bill less what the sites pay running no job); carbon "
                     f"{pct('carbon-pct', cmp.carbon_saving_pct)} and "
                     f"{pct('jobs-carbon-pct', cmp.jobs_carbon_saving_pct)} saved.")
        times = [f"{what} JCT {theirs:,.1f} → {mine:,.1f} h "
                 f"({pct(f'jct-{what}', change, '+')})"
                 for what, mine, theirs, change in (
                     ("mean", cmp.mean_jct_h, cmp.baseline_mean_jct_h,
                      cmp.mean_jct_change_pct),
                     ("p95", cmp.p95_jct_h, cmp.baseline_p95_jct_h, cmp.p95_jct_change_pct))
                 if math.isfinite(mine) and math.isfinite(theirs)]
        if times:
            parts.append("What it costs in time: " + ", ".join(times) + ".")
        charged = cmp.unfinished_charge or cmp.baseline_unfinished_charge
        if charged:
            parts.append(f'<span id="saving-basis">{esc(cmp.basis[0].upper() + cmp.basis[1:])}'
                         f": {cmp.unfinished_charge:,.2f} {cur} here, "
                         f"{cmp.baseline_unfinished_charge:,.2f} {cur} in asap-home.</span>")
        elif cmp.like_for_like_bill:
            parts.append("Both runs did all the work: it is the bill's own saving.")
        undone = [f"{v:.0f} more {what}" for what, v in (
            ("jobs unfinished", cmp.more_unfinished), ("deadline misses", cmp.more_misses))
            if math.isfinite(v) and v > 0]
        if undone:
            parts.append(f"The bill alone: {pct('bill-pct', cmp.bill_saving_pct)} lower; "
                         f'<span id="saving-not-like-for-like" style="color:#a52a2a"><b>not '
                         f"like for like:</b> {' and '.join(undone)} than asap-home.</span>")
    elif math.isfinite(cmp.bill_saving):
        parts.append(f"<b>{esc(policy)}</b> against asap-home: the bill "
                     f"{pct('bill-pct', cmp.bill_saving_pct)} lower; equal-work figures "
                     "were not stored with this run (run it again to see them).")
    else:
        parts.append(esc(missing.get("asap-home", "No saving: asap-home was not run.")))
    if math.isfinite(cmp.above_bound_pct):
        parts.append(f"Cost {pct('above-bound', cmp.above_bound_pct, '+')} above the "
                     "<b>hindsight bound</b> (on equal work; the yardstick, a lower bound on "
                     "every plan)" + (
                         f", {pct('above-replay', cmp.above_replay_pct, '+')} against the "
                         "hindsight plan as <b>replayed</b> (a reference: it pays the restarts "
                         "and transfers the bound leaves out)."
                         if math.isfinite(cmp.above_replay_pct) else "."))
    else:
        parts.append(esc(missing.get("bound", "The hindsight bound was not computed.")))
    return ('<div id="metrics-savings" style="font-size:15px;padding:6px 10px;'
            'border-left:4px solid #1f6f8b;background:#eef6f8">' + " ".join(parts) + "</div>")


BAR_SPAN = 75.0
"""The share of a bar chart's cell (%) the longest bar takes."""


def compare_bars_html(table: pd.DataFrame, metric: str, label: str,
                      fmt: str = "{:,.2f}") -> str:
    """:func:`workbench.app.plots.compare_bars` as plain HTML: one labelled horizontal bar
    per policy, its value written beside it (no Bokeh figure: the Metrics tab draws at once).

    Drawn to scale from zero: a bar's length is its value over the largest, times
    :data:`BAR_SPAN` % of the cell (the rest holds the value's text); bars never shrink to
    make room for it."""
    values = pd.to_numeric(table[metric], errors="coerce")
    top = float(values.max()) if values.notna().any() else 0.0
    rows = []
    for policy, v, color in zip(table["policy"], values, bar_colors(table), strict=True):
        width = (0.0 if not top or top <= 0 or pd.isna(v) or v <= 0
                 else BAR_SPAN * float(v) / top)
        text = "–" if pd.isna(v) else fmt.format(float(v))
        rows.append(
            f'<tr><td style="padding:1px 8px 1px 0;white-space:nowrap;font-size:12px">'
            f'{esc(policy)}</td><td style="width:100%">'
            f'<div style="display:flex;align-items:center">'
            f'<div style="background:{color};height:14px;width:{width:.2f}%;min-width:1px;'
            f'flex:none">'
            f'</div><span style="font-size:12px;padding-left:4px;white-space:nowrap">{text}'
            f"</span></div></td></tr>")
    return (f'<div class="wb-bars" style="flex:1;min-width:220px;padding:0 10px 0 0">'
            f'<div style="font-weight:bold;font-size:13px;margin-bottom:3px">{esc(label)}</div>'
            f'<table style="width:100%;border-collapse:collapse">{"".join(rows)}</table></div>')


ATTRIBUTION_LABELS: tuple[tuple[str, str], ...] = (
    ("efficiency", "efficiency (less energy)"), ("temporal", "temporal (cheaper hours)"),
    ("spatial", "spatial (cheaper sites)"), ("movement", "movement (transfers, restarts)"),
    ("power_limits", "GPU power limits"), ("supply", "supply (renewables, battery)"),
    ("demand", "demand charges (lower peaks)"), ("undone", "work left undone (charged)"),
)
"""The parts of a saving (:func:`workbench.metrics.attribute_savings`), in waterfall order;
the green levers' parts (``power_limits``, ``supply``, ``demand``) are drawn only when not
0 (a run with supply, demand charges or a power-limit menu: the total is then the saving
on the bill's total); ``undone`` (drawn only when given) is the difference of the charges
for work left undone, so that the total is the saving on equal work
(:mod:`workbench.equal_work`)."""

_LEVER_PARTS = frozenset({"power_limits", "supply", "demand"})


def attribution_waterfall(parts: dict[str, float], unit: str, title: str,
                          fmt: str = "{:+,.2f}") -> str:
    """A waterfall of a saving against asap-home, as plain HTML: each part a floating bar
    from the running total (green saves, red costs), then the total saving (dark), each
    bar with its value written on it (no Bokeh figure: the Metrics tab draws at once).

    ``unit`` names the values (``saved (CNY)``); ``parts`` are
    :func:`workbench.metrics.attribute_savings`'s, keyed as :data:`ATTRIBUTION_LABELS`.
    """
    if not parts:
        return ('<div class="wb-waterfall-empty">no attribution: run asap-home as a '
                "comparison</div>")
    unit, title = esc(unit), esc(title)  # both may name the scenario's currency
    steps: list[tuple[str, float, float, str]] = []  # label, from, to, colour
    level = 0.0
    for key, label in ATTRIBUTION_LABELS:
        if key not in parts and key == "undone":
            continue
        if key in _LEVER_PARTS and not float(parts.get(key, 0.0)):
            continue
        v = float(parts.get(key, 0.0))
        steps.append((label, level, level + v, "#2ca02c" if v >= 0 else "#d62728"))
        level += v
    steps.append(("saving (total)", 0.0, level, "#1f6f8b"))
    lo = min(0.0, *(min(a, b) for _, a, b, _ in steps))
    hi = max(0.0, *(max(a, b) for _, a, b, _ in steps))
    span = (hi - lo) or 1.0

    def up(y: float) -> float:  # height above the chart's bottom, % of the plot area
        return 100.0 * (y - lo) / span

    cols, names = [], []
    for label, a, b, colour in steps:
        bottom, top = up(min(a, b)), up(max(a, b))
        value = fmt.format(b - a)
        cols.append(
            f'<div style="position:relative;flex:1" title="{label}: {value} {unit}">'
            f'<div class="wb-waterfall-bar" style="position:absolute;left:18%;right:18%;'
            f'bottom:{bottom:.2f}%;height:max({top - bottom:.2f}%,1px);background:{colour}">'
            f'</div><div style="position:absolute;left:0;right:0;bottom:calc({top:.2f}% + 2px);'
            f'text-align:center;font-size:11px;white-space:nowrap">{value}</div></div>')
        names.append(f'<div style="flex:1;text-align:center;font-size:11px;'
                     f'line-height:1.2">{label}</div>')
    zero = (f'<div style="position:absolute;left:0;right:0;bottom:{up(0.0):.2f}%;'
            'border-top:1px solid #555"></div>')
    return (f'<div class="wb-waterfall" style="flex:1;min-width:300px;padding:0 10px 0 0">'
            f'<div style="font-weight:bold;font-size:13px;margin-bottom:4px">{title}</div>'
            f'<div style="font-size:11px;color:#555">{unit}</div>'
            f'<div style="position:relative;display:flex;height:190px;margin:16px 0 4px 0;'
            f'border-left:1px solid #ccc">{zero}{"".join(cols)}</div>'
            f'<div style="display:flex">{"".join(names)}</div></div>')


def compare_bars_row(table: pd.DataFrame, currency: str) -> str:
    """The Metrics tab's comparison bars side by side: cost, carbon and mean JCT."""
    return ('<div style="display:flex;flex-wrap:wrap;gap:8px">'
            + compare_bars_html(table, "cost", f"the plan's part of the bill ({currency})")
            + compare_bars_html(table, "carbon_kg", "the plan's carbon (kg CO2)", "{:,.1f}")
            + compare_bars_html(table, "mean_jct_h", "mean JCT (h)")
            + "</div>")


def _with_undone(parts: dict[str, float], undone: float) -> dict[str, float]:
    return {**parts, "undone": undone} if math.isfinite(undone) and undone else dict(parts)


def attribution_note_html(bound: dict[str, Any] | None, currency: str,
                          cmp: LikeForLike | None = None) -> str:
    """What the attribution waterfalls split, and the hindsight bound where there is one."""
    note = ("Saving against asap-home split exactly into efficiency (less energy for the "
            "same work: batch, GPU type and count), temporal (cheaper hours at home), "
            "spatial (cheaper datacenters) and movement (transfers and restarts, a cost)")
    if cmp is not None and (cmp.unfinished_charge or cmp.baseline_unfinished_charge):
        note += (", and the work left undone, charged at its least energy at home at home's "
                 "mean price: the bars add up to the saving on equal work")
    note += "."
    if bound and "equal_work_cost" in bound:
        note += (f" Hindsight bound ({esc(bound['kind'])}, on equal work): "
                 f"{float(bound['equal_work_cost']):,.2f} {esc(currency)}, "
                 f"{float(bound['equal_work_carbon_kg']):,.1f} kg.")
    elif bound:
        note += (f" Hindsight bound ({esc(bound['kind'])}): {float(bound['cost']):,.2f} "
                 f"{esc(currency)}, {float(bound['carbon_kg']):,.1f} kg.")
    return f'<div id="attribution-note">{note}</div>'


def attribution_row(attribution: dict[str, dict[str, float]], currency: str,
                    cmp: LikeForLike | None = None) -> str:
    """The cost and the carbon waterfalls of a run's attribution, side by side (with
    ``cmp``, each ends with the work left undone: the total is the saving on equal work)."""
    cost, kg = attribution["cost"], attribution["carbon_kg"]
    if cmp is not None:
        cost = _with_undone(cost, cmp.baseline_unfinished_charge - cmp.unfinished_charge)
        kg = _with_undone(kg, cmp.baseline_unfinished_carbon_kg - cmp.unfinished_carbon_kg)
    return ('<div style="display:flex;flex-wrap:wrap;gap:16px">'
            + attribution_waterfall(cost, f"saved ({currency})",
                                    f"where the saving comes from ({currency})")
            + attribution_waterfall(kg, "saved (kg CO2)",
                                    "where the carbon saving comes from (kg)", "{:+,.1f}")
            + "</div>")


def title_html(title: str) -> str:
    """The page's title bar text."""
    return f'<div class="wb-title" style="font-size:22px;padding:10px 18px">{esc(title)}</div>'


def code(value: object) -> str:
    """``value`` as inline code, escaped (a Markdown code span would break on a backtick)."""
    return f"<code>{esc(value)}</code>"
