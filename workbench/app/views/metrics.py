"""The Metrics tab: the headline, the comparison, where the saving comes from, the V trade-off
and the cost-carbon frontier."""

from __future__ import annotations

import logging

import pandas as pd
import panel as pn
import param

from workbench import runs as stored_runs
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
from workbench.equal_work import EQUAL_WORK_BASIS
from workbench.store import StoreError

log = logging.getLogger(__name__)

COMPARE_SHOWN: tuple[tuple[str, str], ...] = (
    ("policy", "policy"), ("bill_total", "bill ({c})"), ("cost", "plan's part ({c})"),
    ("saving_pct", "saved of bill (%)"), ("jobs_saving_pct", "saved of plan's part (%)"),
    ("above_bound_pct", "above bound (%)"), ("carbon_kg", "carbon, plan's (kg)"),
    ("carbon_saving_pct", "carbon saved (%)"), ("mean_jct_h", "mean JCT (h)"),
    ("deadline_misses", "misses"), ("jobs_unfinished", "not done"), ("migrations", "moves"),
)
"""Columns of the Metrics tab's comparison table (all fit without side-scrolling), every
saving and gap on equal work (:func:`workbench.app.derive.run_comparison`); the comparison
CSV keeps every column of :func:`workbench.app.derive.compare_table`."""


class MetricsView(StateView):
    """The run against the baselines and the hindsight plan; where the saving comes from;
    the V trade-off curve.

    The tab is a column of sections, :attr:`SECTIONS` names them in order (each a method
    returning a viewable that depends on the state).
    """

    SECTIONS: tuple[str, ...] = ("_headline", "_compare", "_attribution", "_tradeoff",
                                 "_frontier")
    IMMEDIATE: frozenset[str] = frozenset({"_headline"})
    """Sections drawn with the page; the others follow once it has loaded."""

    @param.depends("state.result", "state.baselines", "state.bound", "state.baseline_policies")
    def _headline(self) -> pn.viewable.Viewable:
        res = self.s.result
        metrics = res.metrics if res is not None else None
        currency = str(metrics.get("currency", "")) if metrics else ""
        html = headline_html(metrics, currency)
        if res is not None:
            html += caps_html(derive.cap_status(res), res.metrics)
            cmp = derive.run_comparison(res.policy, res.metrics, self.s.baselines, self.s.bound)
            html += savings_html(cmp, res.policy, currency, self.s.missing_references())
        return pn.pane.HTML(html, sizing_mode="stretch_width")

    @param.depends("state.result", "state.baselines", "state.bound", "state.baseline_policies")
    def _compare(self) -> pn.viewable.Viewable:
        res = self.s.result
        if res is None:
            return no_run()
        currency = str(res.metrics.get("currency", ""))
        table = derive.compare_table(res.policy, res.metrics, self.s.baselines, self.s.bound)
        missing = [b for b in self.s.baseline_policies
                   if b not in self.s.baselines and b != res.policy]
        note = (f"Selected under *Compare with* but not run with this run's settings (press "
                f"**Run** to run them): {esc(', '.join(missing))}." if missing else "")
        cols = [(k, lbl.format(c=currency)) for k, lbl in COMPARE_SHOWN]
        shown = table[[k for k, _ in cols]].rename(columns=dict(cols)).round(2)
        return pn.Column(
            data_table(shown, css_classes=["wb-compare"], widths={"policy": 150}),
            pn.pane.Markdown("First row: this run. *Bill*: what the sites pay; *plan's "
                             "part*: the bill less what the same sites pay running no job. "
                             "Savings and gaps are on equal work: "
                             f"{esc(EQUAL_WORK_BASIS)}. *Above bound*: against the hindsight "
                             "bound (no restarts or transfers: a lower bound on every plan); "
                             "the hindsight plan as replayed is the offline row and the green "
                             "bar (a reference). Grey bar: asap-home, the reference of the "
                             "savings. The comparison CSV (Export) has every column (the gap "
                             "to the replay too). "
                             + note),
            pn.pane.HTML(compare_bars_row(table, currency), sizing_mode="stretch_width",
                         css_classes=["wb-compare-bars"]),
            sizing_mode="stretch_width",
        )

    @param.depends("state.result", "state.baselines", "state.bound",
                   "state.baseline_policies")
    def _attribution(self) -> pn.viewable.Viewable:
        res = self.s.result
        att = None if res is None else res.meta.get("attribution")
        if not att or res is None:
            why = None if res is None else res.meta.get("attribution_missing")
            text = (f"**Where the saving comes from:** {esc(why)}." if why else
                    "**Where the saving comes from:** "
                    + esc(self.s.missing_references()["asap-home"]))
            return pn.pane.Markdown(text, css_classes=["wb-attribution-empty"])
        currency = str(res.metrics.get("currency", ""))
        cmp = derive.run_comparison(res.policy, res.metrics, self.s.baselines, self.s.bound)
        return pn.Column(
            pn.pane.HTML(attribution_note_html(self.s.bound, currency, cmp),
                         css_classes=["wb-attribution"], sizing_mode="stretch_width"),
            pn.pane.HTML(attribution_row(att, currency, cmp), sizing_mode="stretch_width",
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

    def frontier_frame(self) -> pd.DataFrame | None:
        """The cost-carbon frontier of the stored runs (:func:`derive.frontier_frame`): the
        shown run's policy at the caps it was run with, its other settings the same, beside
        the hindsight plan's stored runs (their bounds); None with fewer than two points."""
        info = self.s.run_info
        if self.s.scenario is None or not info.get("policy"):
            return None
        try:
            with self.s.store() as store:
                runs = store.runs(self.s.scenario.name)
                keep = [rec["run_id"] for rec in runs.to_dict("records")
                        if rec.get("policy") == "offline"
                        or stored_runs.differs_only_in(info, rec, "carbon_cap_kg")]
                runs = runs[runs["run_id"].isin(keep)]
                metrics = {rid: store.run_metrics(rid) for rid in runs["run_id"]}
        except StoreError as exc:
            log.warning("the cost-carbon frontier of stored runs is not shown: %s", exc)
            return None
        frame = derive.frontier_frame(runs, metrics)
        return frame if int((frame["policy"] == info["policy"]).sum()) >= 2 else None

    @param.depends("state.run_info", "state.runs_table")
    def _frontier(self) -> pn.viewable.Viewable:
        frame = self.frontier_frame()
        policy = str(self.s.run_info.get("policy", ""))
        if frame is None:
            return pn.pane.Markdown(
                "**Cost-carbon frontier:** needs two or more stored runs of this policy that "
                "differ from this run in the carbon cap alone: `workbench frontier --scenario "
                "NAME --caps 0%,5%,10%,20%` stores them, with the hindsight plan at each cap.",
                css_classes=["wb-frontier-empty"])
        currency = self.s.scenario.currency if self.s.scenario is not None else ""
        return pn.Column(
            pn.pane.Markdown(f"**Cost-carbon frontier** of {policy} at "
                             f"{int((frame['policy'] == policy).sum())} carbon caps; dashed: "
                             "the hindsight bound at each cap (no plan can go below it)."),
            pn.pane.HoloViews(plots.frontier(frame, policy, currency),
                              sizing_mode="stretch_width"),
            css_classes=["wb-frontier"], sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        # The headline first; the tables and charts once the page is in the browser (a
        # spinner until then), so the first page does not wait for five charts.
        return pn.Column(run_banner(self.s),
                         *(pn.panel(getattr(self, name), sizing_mode="stretch_width",
                                    defer_load=name not in self.IMMEDIATE)
                           for name in self.SECTIONS),
                         sizing_mode="stretch_width")
