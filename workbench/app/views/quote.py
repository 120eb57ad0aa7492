"""The Quote tab: where, on what and when a new job should run."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import panel as pn
import param

from workbench.app import derive
from workbench.app.markup import esc
from workbench.app.views.common import ERROR_STYLE, StateView, data_table, typed_input, zone_times
from workbench.model import Scenario
from workbench.power_limits import DEFAULT_MENU
from workbench.quote import JobSpec, QuoteError


def horizon_hours(scenario: Scenario) -> float:
    """Length of the scenario's horizon, hours."""
    return scenario.slot_s * scenario.n_slots / 3600.0


def median_work(scenario: Scenario, app: str) -> float:
    """Median ``work_samples`` of the scenario's training jobs of ``app`` (NaN if none)."""
    works = [j.work_samples for j in scenario.jobs if j.is_training and j.app == app]
    return float(pd.Series(works).median()) if works else math.nan


QUOTE_SHOWN: tuple[tuple[str, str], ...] = (
    ("best", ""), ("datacenter", "datacenter"), ("gpu_type", "GPU"), ("n_gpus", "GPUs"),
    ("power_limit_w", "power limit (W/GPU)"),
    ("start", "start ({tz})"), ("finish", "finish ({tz})"), ("duration_h", "hours"),
    ("hours_interval", "hours, 90% interval"),
    ("cost", "cost ({c})"), ("carbon_kg", "carbon (kg)"), ("energy_kwh", "energy (kWh)"),
    ("feasible", "meets deadline"), ("note", "note"),
)
"""Columns of the Quote tab's table, in order: the decision first, details after."""


def quote_table(options: pd.DataFrame, currency: str, tz: str = "UTC",
                order: str = "cheapest") -> pd.DataFrame:
    """:attr:`workbench.quote.Quote.options` as shown: sorted by ``order`` (options that meet
    the deadline first), the best marked, readable columns and units, rounded."""
    table = derive.sort_quote(options, order)
    for col in ("start", "finish"):
        table[col] = zone_times(table[col], tz).dt.strftime("%m-%d %H:%M")
    best = bool(len(table)) and bool(table["feasible"].iloc[0])
    table["best"] = ["★ best" if best and i == 0 else "" for i in range(len(table))]
    if {"duration_lo_h", "duration_hi_h"} <= set(table.columns):
        # The predicted profile's run-time interval; a fitted profile's is its point.
        table["hours_interval"] = [f"{lo:.1f}-{hi:.1f}" for lo, hi in
                                   zip(table["duration_lo_h"], table["duration_hi_h"],
                                       strict=True)]
    cols = [(k, label.format(c=currency, tz=tz)) for k, label in QUOTE_SHOWN if k in table]
    return table[[k for k, _ in cols]].rename(columns=dict(cols)).round(2)


class QuoteView(StateView):
    """Describe a new job and see where, on what and when it should run."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.app = pn.widgets.Select(label="application")
        self.work = typed_input("work (effective samples)", "", css_classes=["wb-work"])
        self.gpus = pn.widgets.IntRangeSlider(label="GPU count", start=1, end=32, value=(1, 8))
        self.arrival = pn.widgets.DatetimePicker(label="arrival (empty: horizon start)",
                                                 value=None, enable_seconds=False)
        self.deadline = typed_input("deadline (h after arrival)", "24",
                                    css_classes=["wb-deadline"])
        self.checkpoint = typed_input("data/checkpoint moved if away (GB)", "1")
        self.home = pn.widgets.Select(label="home datacenter")
        self.carbon_price = typed_input("carbon price (per kg CO2)", "0")
        self.order = pn.widgets.RadioButtonGroup(label="best is", options=list(derive.QUOTE_ORDERS),
                                                 value="cheapest", css_classes=["wb-quote-order"])
        self.respect = pn.widgets.Checkbox(label="respect the latest plan's GPU occupancy")
        self.limits = pn.widgets.Checkbox(
            label="also at GPU power limits ("
                  + ", ".join(f"{100 * f:.0f}" for f in DEFAULT_MENU if f < 1.0)
                  + " % of board power: slower, less energy)", css_classes=["wb-quote-limits"])
        self.button = pn.widgets.Button(label="Quote", color="primary",
                                        css_classes=["wb-quote-button"])
        self.errors = pn.pane.Markdown("", styles=ERROR_STYLE, css_classes=["wb-quote-errors"])
        self.button.on_click(self._on_quote)
        self.app.param.watch(self._default_work, "value")
        for w in (self.work, self.deadline, self.checkpoint, self.carbon_price):
            w.param.watch(self._check, "value_input")
        self.s.param.watch(self._choices, "scenario")
        self.s.param.watch(self._arrival_zone, "tz")
        self._choices()

    FIELDS: tuple[tuple[str, str, float, bool], ...] = (
        ("work", "work", 0.0, False), ("deadline", "deadline", 0.0, False),
        ("checkpoint", "checkpoint GB", 0.0, True), ("carbon_price", "carbon price", 0.0, True),
    )
    """Typed quote fields: attribute, label, lower bound, bound allowed."""

    def field_errors(self) -> dict[str, str]:
        """Why each typed field is refused (empty: the quote may run)."""
        out = {}
        for attr, label, low, ok in self.FIELDS:
            w = getattr(self, attr)
            raw = str(w.value_input or "").strip()
            try:
                v = float(raw.replace(",", ""))
            except ValueError:
                out[attr] = f"{label}: {raw!r} is not a number"
                continue
            if not math.isfinite(v) or v < low or (v == low and not ok):
                out[attr] = f"{label}: must be {'>=' if ok else '>'} {low:g}, got {v:g}"
        return out

    def _check(self, *_: Any) -> None:
        errors = self.field_errors()
        self.errors.object = "\n\n".join(esc(e) for e in errors.values())  # quote the typed
        self.button.disabled = bool(errors)

    def _value(self, attr: str) -> float:
        w = getattr(self, attr)
        return float(str(w.value_input or "").replace(",", ""))

    def _choices(self, *_: Any) -> None:
        sc = self.s.scenario
        if sc is None:
            return
        apps = sorted({p.app for p in sc.profiles})
        homes = [d.name for d in sc.datacenters]
        self.carbon_price.label = f"carbon price ({sc.currency} per kg CO2)"
        self.app.param.update(options=apps,
                              value=self.app.value if self.app.value in apps else apps[0])
        self.home.param.update(options=homes,
                               value=self.home.value if self.home.value in homes else homes[0])
        try:
            deadline = min(self._value("deadline"), horizon_hours(sc))
        except ValueError:
            deadline = min(24.0, horizon_hours(sc))
        self.deadline.param.update(value=f"{deadline:g}", value_input=f"{deadline:g}")
        self._arrival_zone()
        self._default_work()

    def _arrival_zone(self, *_: Any) -> None:
        """The arrival picker in the sidebar's time zone (its value is read in that zone)."""
        sc, tz = self.s.scenario, self.s.tz or "UTC"
        if sc is None:
            return
        start = pd.Timestamp(sc.start).tz_convert(tz).tz_localize(None).to_pydatetime()
        end = pd.Timestamp(sc.end).tz_convert(tz).tz_localize(None).to_pydatetime()
        self.arrival.param.update(start=start, end=end, value=None, label=f"arrival ({tz})",
                                  description="Empty: the start of the horizon.")

    def _default_work(self, *_: Any) -> None:
        sc = self.s.scenario
        if sc is not None and self.app.value:
            work = median_work(sc, self.app.value)
            text = f"{work:.3g}" if math.isfinite(work) else "1e6"
            self.work.param.update(value=text, value_input=text)
            self._check()

    def spec(self) -> JobSpec:
        tz = self.s.tz or "UTC"
        return JobSpec(app=self.app.value, work_samples=self._value("work"),
                       home=self.home.value, min_gpus=int(self.gpus.value[0]),
                       max_gpus=int(self.gpus.value[1]),
                       deadline_h=self._value("deadline"),
                       arrival=(None if self.arrival.value is None
                                else pd.Timestamp(self.arrival.value).tz_localize(tz)
                                .tz_convert("UTC").to_pydatetime()),
                       checkpoint_gb=self._value("checkpoint"))

    def _on_quote(self, _event: Any) -> None:
        if self.field_errors():
            self._check()
            return
        try:
            spec = self.spec()
        except (QuoteError, TypeError, ValueError) as exc:
            self.s.say(f"quote: bad input: {exc}", "danger")
            return
        self.s.quote(spec, carbon_price_per_kg=self._value("carbon_price"),
                     respect_plan=self.respect.value,
                     power_limits=DEFAULT_MENU if self.limits.value else ())

    @param.depends("state.last_quote", "state.tz", "order.value")
    def _result(self) -> pn.viewable.Viewable:
        q = self.s.last_quote
        if q is None:
            return pn.pane.Markdown("Describe a job and press **Quote**.")
        tz = self.s.tz or "UTC"
        order = self.order.value
        ranked = derive.sort_quote(q.options, order)
        best = ranked.iloc[0] if len(ranked) and bool(ranked["feasible"].iloc[0]) else None
        if best is None:
            head = "**No option finishes before the deadline.** Allow more GPUs or time."
        else:
            start = pd.Timestamp(best["start"]).tz_convert(tz)
            fastest = ranked[ranked["feasible"]].sort_values("finish").iloc[0]
            interval = (f" (predicted speed: {best['duration_lo_h']:.1f}-"
                        f"{best['duration_hi_h']:.1f} h, 90 % interval)"
                        if best.get("profile") == "predicted" else "")
            head = (f"**Best ({derive.QUOTE_ORDERS[order][1]} before the deadline):** "
                    f"{esc(best['datacenter'])}, {best['n_gpus']} x {esc(best['gpu_type'])}, "
                    f"start {start:%a %m-%d %H:%M} {esc(tz)}, {best['duration_h']:.1f} h"
                    f"{interval} — {best['cost']:,.2f} {esc(q.currency)}, "
                    f"{best['carbon_kg']:,.2f} kg CO2, {best['energy_kwh']:,.1f} kWh. Fastest "
                    f"option: {fastest['n_gpus']} x {esc(fastest['gpu_type'])} in "
                    f"{esc(fastest['datacenter'])}, {fastest['duration_h']:.1f} h.")
        options = quote_table(q.options, q.currency, tz, order)
        # Two decimals, right-aligned, so a column reads down (1.70 under 1.65, not 1.7).
        fixed = [c for c in options.columns if c != "hours, 90% interval"
                 and c.startswith(("hours", "cost", "carbon", "energy"))]
        return pn.Column(pn.pane.Markdown(head, css_classes=["wb-quote"]),
                         data_table(options, pagination="local", page_size=15,
                               css_classes=["wb-quote-options"],
                               # Ordered by *Best is the…*; no header arrows over the
                               # labels of the narrow columns.
                               sortable=False,
                               # Shares of the width that add up to it (fixed pixels
                               # left the power limit and the note too narrow at 1366
                               # px: "powe limit"); what is longer wraps.
                               widths={"": "6%", "datacenter": "8%", "GPU": "6%",
                                       "GPUs": "5%", "power limit (W/GPU)": "6%",
                                       f"start ({tz})": "9%", f"finish ({tz})": "9%",
                                       "hours": "5%", "hours, 90% interval": "6%",
                                       f"cost ({q.currency})": "6%", "carbon (kg)": "6%",
                                       "energy (kWh)": "6%", "meets deadline": "7%",
                                       "note": "15%"},
                               formatters={"note": {"type": "textarea"}, **{
                                   c: {"type": "money", "precision": 2, "symbol": ""}
                                   for c in fixed}},
                               text_align={c: "right" for c in fixed}),
                         pn.pane.Markdown("\n".join(f"- {esc(w)}" for w in q.warnings)),
                         sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        # The form in three short columns above the options, so the table has the full
        # width and its key columns need no side-scrolling.
        for w in (self.app, self.work, self.gpus, self.arrival, self.deadline, self.home,
                  self.checkpoint, self.carbon_price):
            w.sizing_mode = "stretch_width"
        form = pn.Row(
            pn.Column(self.app, self.work, self.gpus, width=235),
            pn.Column(self.arrival, self.deadline, self.home, width=235),
            pn.Column(self.checkpoint, self.carbon_price, width=235),
            pn.Column(pn.pane.Markdown("**Best is the…**", margin=(5, 10, 0, 10)),
                      self.order, self.respect, self.limits, self.button, self.errors,
                      width=235))
        return pn.Column(form, pn.panel(self._result, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")
