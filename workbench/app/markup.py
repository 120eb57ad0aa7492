"""The app's HTML: every fragment the views put in an HTML pane, and the one escaping helper.

Every user-supplied string (scenario, datacenter, region, job, run and GPU names, currency,
descriptions, typed values, warnings, error messages, file names) that reaches HTML or
Markdown goes through :func:`esc` first.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from workbench import runs as stored_runs

HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("cost", "Cost", "{:,.2f}"),
    ("carbon_kg", "Carbon (kg)", "{:,.1f}"),
    ("energy_kwh", "Energy (kWh)", "{:,.1f}"),
    ("mean_jct_h", "Mean JCT (h)", "{:,.2f}"),
    ("deadline_misses", "Deadline misses", "{:d}"),
    ("migrations", "Migrations", "{:d}"),
)
"""Headline metrics of the Metrics tab: key, label, format (element id ``metric-<key>``)."""


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
        unit = f" {currency}" if key == "cost" and currency else ""
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
        when = f", {stamp.tz_convert(tz):%Y-%m-%d %H:%M} {tz}"
    stored = (f"stored run <code>{info.get('run_id')}</code>" if info.get("run_id")
              else "not stored")
    name = f"<b>{info['name']}</b> · " if info.get("name") else ""
    html = (f'<div id="wb-run-banner" style="padding:4px 10px;border-left:4px solid #1f6f8b;'
            f'background:#f4f8fa;font-size:13px">{name}{stored_runs.knobs_text(info)}'
            f'<span style="color:#666"> — {stored}{when}</span></div>')
    if running:
        html += ('<div id="wb-stale" style="padding:4px 10px;margin-top:4px;background:#fff3cd;'
                 'border-left:4px solid #e0a800;font-size:13px"><b>Stale:</b> a new run is '
                 'going; what follows is the run named above until it finishes.</div>')
    if warnings:
        items = "".join(f"<li>{w}</li>" for w in warnings[:8])
        more = f"<li>… {len(warnings) - 8} more</li>" if len(warnings) > 8 else ""
        html += ('<div id="wb-run-warnings" style="padding:4px 10px;margin-top:4px;'
                 'background:#fdecea;border-left:4px solid #d93025;font-size:13px">'
                 f"<b>Warnings of this run</b><ul style='margin:2px 0'>{items}{more}</ul></div>")
    return html


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
            f'<tr><td style="padding-right:10px">{r["policy"]}</td>'
            f'<td style="width:40%"><div style="background:#e6eef1;height:10px;border-radius:5px">'
            f'<div style="background:#1f6f8b;width:{pct:.0f}%;height:10px;border-radius:5px">'
            f'</div></div></td><td style="padding:0 10px" class="wb-pct">{pct:.0f} %</td>'
            f"<td>{state}</td></tr>")
    done = sum(r["done"] for r in rows)
    total = sum(r["total"] for r in rows)
    return (f'<div id="wb-progress"><b>Running: {100 * done / max(total, 1):.0f} % done, '
            f"about {_duration(total_left)} left</b> (estimates from this run's pace)"
            f'<table style="width:100%;font-size:13px">{"".join(lines)}</table></div>')


def caps_html(caps: list[dict[str, Any]], metrics: dict[str, Any] | None = None) -> str:
    """Every cap of a run as met or missed, beside its results.

    ``caps`` are the carbon caps (:func:`workbench.app.derive.cap_status`); ``metrics`` give
    the metered power-cap violations. Anything missed is a red warning
    (``id="metrics-cap-warning"``); caps all met are a quiet note (``id="metrics-cap-met"``).
    """
    missed = []
    for c in caps:
        if not c["met"]:
            where = "" if c["scope"] == "all" else f" in {c['scope']}"
            cap, kg = float(c["cap_kg"]), float(c["carbon_kg"])
            missed.append(f"<b>Carbon cap missed{where}:</b> {kg:,.1f} kg emitted against a cap "
                          f"of {cap:,.1f} kg ({100 * (kg - cap) / cap:+.1f} %).")
    n = int((metrics or {}).get("power_cap_violations", 0) or 0)
    if n:
        missed.append(f"<b>Power cap missed</b> in {n} datacenter-slot(s) (metered above "
                      f"{(metrics or {}).get('power_cap_kw')} kW).")
    if missed:
        return ('<div id="metrics-cap-warning" style="font-size:15px;padding:6px 10px;'
                'border-left:4px solid #d62728;background:#fdecea">' + " ".join(missed)
                + "</div>")
    if caps:
        met = "; ".join(("all datacenters" if c["scope"] == "all" else c["scope"])
                        + f" {float(c['carbon_kg']):,.1f} of {float(c['cap_kg']):,.1f} kg"
                        for c in caps)
        return f'<div id="metrics-cap-met" style="padding:4px 10px">Carbon cap met: {met}.</div>'
    return ""


def savings_html(summary: dict[str, float], policy: str, currency: str = "") -> str:
    """The run's savings as sentences; numbers sit in ``<span id="saving-KEY">``."""
    if not summary:
        return ""

    def pct(key: str, sign: str = "") -> str:
        v = summary.get(key, math.nan)
        text = "–" if not math.isfinite(v) else format(v, f"{sign}.1f") + " %"
        return f'<span id="saving-{key}">{text}</span>'

    saved = summary.get("cost_saved", math.nan)
    money = "" if not math.isfinite(saved) else f" ({saved:,.2f} {currency})"
    parts = [f"<b>{policy}</b> against asap-home (run at once, at home): cost "
             f"{pct('cost_saving_pct')}{money} saved, carbon {pct('carbon_saving_pct')} saved."]
    gap = summary.get("cost_vs_offline_pct", math.nan)
    if math.isfinite(gap):
        parts.append(f"Cost above the hindsight plan (replayed; perfect hindsight): "
                     f"{pct('cost_vs_offline_pct', '+')}.")
    else:
        parts.append("The hindsight plan was not run (add <i>offline</i> under "
                     "<i>Compare with</i>).")
    undone = [f"{v:.0f} more {what}" for what, v in (
        ("jobs unfinished", summary.get("more_unfinished", math.nan)),
        ("deadline misses", summary.get("more_misses", math.nan))) if math.isfinite(v) and v > 0]
    if undone:
        parts.append(f'<span id="saving-not-like-for-like" style="color:#a52a2a"><b>Not like '
                     f"for like:</b> {' and '.join(undone)} than asap-home; the saving "
                     "includes work this run left undone or late.</span>")
    return ('<div id="metrics-savings" style="font-size:15px;padding:6px 10px;'
            'border-left:4px solid #1f6f8b;background:#eef6f8">' + " ".join(parts) + "</div>")
