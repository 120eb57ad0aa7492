"""The Plan tab: GPU occupancy per pool and the Gantt of placements."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pandas as pd
import panel as pn
import param

from workbench.app import derive, plots
from workbench.app.markup import esc
from workbench.app.views.common import StateView, fit_window, no_run, run_banner, zone_times

GANTT_PAGE = 60
"""Jobs per Gantt page: each row keeps its label at any scenario size."""


class PlanView(StateView):
    """GPU occupancy per pool against capacity, and a Gantt of placements: grouped by
    datacenter or pool, filtered by kind and job, zoomed to a window, paged."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.kind = pn.widgets.RadioButtonGroup(
            label="jobs", options=["all jobs", "training", "inference"], value="all jobs",
            css_classes=["wb-kind"])
        self.group = pn.widgets.RadioButtonGroup(
            label="group", options=["datacenter", "pool", "none"], value="datacenter",
            css_classes=["wb-group"])
        self.search = pn.widgets.TextInput(label="Find jobs (id contains; several: a, b)",
                                           placeholder="e.g. bert, 012", css_classes=["wb-search"],
                                           width=260)
        lo, hi = dt.datetime(2000, 1, 1), dt.datetime(2000, 1, 2)
        self.window = pn.widgets.DatetimeRangeSlider(label="Window", start=lo, end=hi,
                                                     value=(lo, hi), step=900_000,
                                                     sizing_mode="stretch_width")
        self.page = pn.widgets.IntInput(label="Page", value=1, start=1, width=90)
        self.s.param.watch(self._bounds, ["scenario", "tz"])
        self.search.param.watch(lambda _e: setattr(self.page, "value", 1), "value_input")
        self._bounds()

    def _bounds(self, *_: Any) -> None:
        fit_window(self.window, self.s, "Window")

    @param.depends("state.result", "state.tz", "kind.value", "group.value",
                   "search.value_input", "window.value", "page.value")
    def _plots(self) -> pn.viewable.Viewable:
        res, sc = self.s.result, self.s.scenario
        if res is None or sc is None:
            return no_run()
        tz = self.s.tz or "UTC"
        lo, hi = self.window.value
        lo_utc = pd.Timestamp(lo).tz_localize(tz).tz_convert("UTC")
        hi_utc = pd.Timestamp(hi).tz_localize(tz).tz_convert("UTC")
        segments = derive.gantt_segments(res.plan)
        shown = derive.filter_segments(segments, search=self.search.value_input or "",
                                       kind=self.kind.value, start=lo_utc, end=hi_utc)
        groups = derive.job_groups(shown, self.group.value)
        order = derive.job_order(shown)
        if self.group.value != "none":
            order = sorted(order, key=lambda j: (groups.get(j, ""), order.index(j)))
        pages = max(1, math.ceil(len(order) / GANTT_PAGE))
        page = min(max(int(self.page.value or 1), 1), pages)
        if self.page.end != pages:
            self.page.end = pages
        rows = order[(page - 1) * GANTT_PAGE: page * GANTT_PAGE]
        apps = {j.job_id: j.app for j in sc.jobs}
        visible = shown[shown["job_id"].isin(rows)].assign(
            start=lambda f: zone_times(f["start"], tz), end=lambda f: zone_times(f["end"], tz),
            app=lambda f: f["job_id"].map(apps).fillna(""),
            group=lambda f: f["job_id"].map(groups).fillna(""))
        occ = derive.occupancy_long(res.slots)
        if not occ.empty:
            occ = occ.assign(time=zone_times(occ["time"], tz))
        xlim = (pd.Timestamp(lo), pd.Timestamp(hi))
        note = (f"**{len(order)}** jobs match ({segments['job_id'].nunique()} in the run), "
                f"page {page} of {pages} ({GANTT_PAGE} jobs a page, every row labelled). A bar "
                "is a segment: consecutive slots in one datacenter and configuration; hover it "
                f"for job, GPUs, energy, cost ({esc(sc.currency)}) and carbon. Times in "
                f"{esc(tz)}.")
        return pn.Column(
            pn.pane.HoloViews(plots.occupancy(occ, derive.pool_capacity(sc), xlim=xlim,
                                              tz=tz, colors=derive.site_colors(sc)),
                              sizing_mode="stretch_width"),
            pn.pane.Markdown(note, css_classes=["wb-gantt-note"]),
            pn.pane.HoloViews(plots.gantt(visible, rows, currency=sc.currency, tz=tz,
                                          xlim=xlim, groups=groups,
                                          colors=derive.site_colors(sc)),
                              sizing_mode="stretch_width", css_classes=["wb-gantt"]),
            sizing_mode="stretch_width",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        controls = pn.Row(
            pn.Column(pn.pane.Markdown("**Jobs**", margin=(0, 10)), self.kind),
            pn.Column(pn.pane.Markdown("**Group rows by**", margin=(0, 10)), self.group),
            self.search, self.page, sizing_mode="stretch_width")
        return pn.Column(run_banner(self.s), controls, self.window,
                         pn.panel(self._plots, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")
