"""The Metrics tab: the headline, the comparison, where the saving comes from, the V trade-off."""

from __future__ import annotations

import panel as pn
import param

from workbench.app import derive, plots
from workbench.app.markup import (
    attribution_note_html,
    attribution_row,
    caps_html,
    compare_bars_row,
    esc,
    headline_html,
    savings_html,
)
from workbench.app.views.common import StateView, data_table, no_run, run_banner

COMPARE_SHOWN: tuple[tuple[str, str], ...] = (
    ("policy", "policy"), ("cost", "cost ({c})"), ("cost_saving_pct", "cost saved (%)"),
    ("cost_vs_offline_pct", "above hindsight plan (%)"), ("carbon_kg", "carbon (kg)"),
    ("carbon_saving_pct", "carbon saved (%)"), ("energy_kwh", "energy (kWh)"),
    ("mean_jct_h", "mean JCT (h)"), ("deadline_misses", "misses"),
    ("jobs_unfinished", "not done"), ("migrations", "moves"),
)
"""Columns of the Metrics tab's comparison table (all fit without side-scrolling); the
comparison CSV keeps every column of :func:`workbench.app.derive.compare_table`."""


class MetricsView(StateView):
    """The run against the baselines and the hindsight plan; where the saving comes from;
    the V trade-off curve.

    The tab is a column of sections, :attr:`SECTIONS` names them in order (each a method
    returning a viewable that depends on the state).
    """

    SECTIONS: tuple[str, ...] = ("_headline", "_compare", "_attribution", "_tradeoff")
    IMMEDIATE: frozenset[str] = frozenset({"_headline"})
    """Sections drawn with the page; the others follow once it has loaded."""

    @param.depends("state.result", "state.baselines")
    def _headline(self) -> pn.viewable.Viewable:
        res = self.s.result
        metrics = res.metrics if res is not None else None
        currency = str(metrics.get("currency", "")) if metrics else ""
        html = headline_html(metrics, currency)
        if res is not None:
            html += caps_html(derive.cap_status(res), res.metrics)
            table = derive.compare_table(res.policy, res.metrics, self.s.baselines)
            html += savings_html(derive.savings_summary(table), res.policy, currency)
        return pn.pane.HTML(html, sizing_mode="stretch_width")

    @param.depends("state.result", "state.baselines")
    def _compare(self) -> pn.viewable.Viewable:
        res = self.s.result
        if res is None:
            return no_run()
        currency = str(res.metrics.get("currency", ""))
        table = derive.compare_table(res.policy, res.metrics, self.s.baselines)
        missing = [b for b in self.s.baseline_policies
                   if b not in self.s.baselines and b != res.policy]
        note = (f"Not compared (unavailable, not selected or not stored for this run's "
                f"settings): {esc(', '.join(missing))}." if missing else "")
        cols = [(k, lbl.format(c=currency)) for k, lbl in COMPARE_SHOWN]
        shown = table[[k for k, _ in cols]].rename(columns=dict(cols)).round(2)
        for col in ("misses", "not done", "moves"):
            shown[col] = shown[col].astype("Int64")
        return pn.Column(
            data_table(shown, css_classes=["wb-compare"], widths={"policy": 170}),
            pn.pane.Markdown("First row: this run. Grey bar: asap-home, the reference of the "
                             "savings; green: offline, the hindsight plan (replayed; its "
                             "bound is under *Where the saving comes from*). The comparison "
                             "CSV (Export) has every column. " + note),
            pn.pane.HTML(compare_bars_row(table, currency), sizing_mode="stretch_width",
                         css_classes=["wb-compare-bars"]),
            sizing_mode="stretch_width",
        )

    @param.depends("state.result")
    def _attribution(self) -> pn.viewable.Viewable:
        res = self.s.result
        att = None if res is None else res.meta.get("attribution")
        if not att:
            why = None if res is None else res.meta.get("attribution_missing")
            text = (f"**Where the saving comes from:** {esc(why)}." if why else
                    "**Where the saving comes from:** run with asap-home under *Compare "
                    "with* to see it.")
            return pn.pane.Markdown(text, css_classes=["wb-attribution-empty"])
        currency = str(res.metrics.get("currency", "")) if res is not None else ""
        bound = res.meta.get("bound") if res is not None else None
        return pn.Column(
            pn.pane.HTML(attribution_note_html(bound, currency),
                         css_classes=["wb-attribution"], sizing_mode="stretch_width"),
            pn.pane.HTML(attribution_row(att, currency), sizing_mode="stretch_width",
                         css_classes=["wb-attribution-chart"]),
            sizing_mode="stretch_width")

    @param.depends("state.tradeoff", "state.run_info")
    def _tradeoff(self) -> pn.viewable.Viewable:
        frame = self.s.tradeoff
        if frame is None or len(frame) < 2:
            return pn.pane.Markdown(
                "**V trade-off:** needs two or more stored `lyapunov` runs that differ from "
                "this run in V alone (same caps, GPU menu, threshold, forecast and slot). Run "
                "other V values with *Save runs in the store* on, or `workbench sweep`.",
                css_classes=["wb-tradeoff-empty"])
        return pn.Column(
            pn.pane.Markdown(f"**V trade-off** of {len(frame)} stored runs that differ from "
                             "this one in V alone."),
            pn.pane.HoloViews(plots.tradeoff(frame, self.s.scenario.currency
                                             if self.s.scenario is not None else ""),
                              sizing_mode="stretch_width"),
            sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        # The headline first; the tables and charts once the page is in the browser (a
        # spinner until then), so the first page does not wait for five charts.
        return pn.Column(run_banner(self.s),
                         *(pn.panel(getattr(self, name), sizing_mode="stretch_width",
                                    defer_load=name not in self.IMMEDIATE)
                           for name in self.SECTIONS),
                         sizing_mode="stretch_width")
