"""The Migrations tab: what moved, when and why."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
import panel as pn
import param

from workbench.app import derive, plots
from workbench.app.markup import esc
from workbench.app.views.common import (
    StateView,
    data_table,
    fit_window,
    no_run,
    run_banner,
    zone_times,
)

MIGRATION_SHOWN: tuple[tuple[str, str], ...] = (
    ("time", "time ({tz})"), ("job_id", "job"), ("from_region", "from"), ("to_region", "to"),
    ("why", "why (grid in that slot)"), ("moved", "what moved"),
    ("transfer_gb", "GB moved"), ("transfer_s", "transfer (s)"),
)
"""Columns of the Migrations tab's table: key and header. The numbers are the migrations
CSV's (``transfer_gb``: dataset and checkpoint; ``transfer_s``), rounded for the screen."""


class MigrationsView(StateView):
    """The migration plan as a table and as flows between datacenters, filtered by time."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        lo, hi = dt.datetime(2000, 1, 1), dt.datetime(2000, 1, 2)
        self.window = pn.widgets.DatetimeRangeSlider(label="Time window", start=lo, end=hi,
                                                     value=(lo, hi), step=900_000,
                                                     sizing_mode="stretch_width")
        self.s.param.watch(self._bounds, ["scenario", "tz"])
        self._bounds()

    def _bounds(self, *_: Any) -> None:
        fit_window(self.window, self.s, "Time window")

    def _selected(self) -> tuple[Any, Any]:
        tz = self.s.tz or "UTC"
        lo, hi = self.window.value or (None, None)
        return (None if lo is None else pd.Timestamp(lo).tz_localize(tz).tz_convert("UTC"),
                None if hi is None else pd.Timestamp(hi).tz_localize(tz).tz_convert("UTC"))

    @param.depends("state.result", "state.tz", "window.value")
    def _content(self) -> pn.viewable.Viewable:
        res, sc = self.s.result, self.s.scenario
        if res is None or sc is None:
            return no_run()
        tz = self.s.tz or "UTC"
        lo, hi = self._selected()
        moves = derive.filter_migrations(res.migrations, lo, hi)
        flow = derive.migration_flows(res.plan, res.migrations, lo, hi)
        routes = flow.rename(columns={"from_region": "from", "to_region": "to",
                                      "gb": "GB moved (datasets and checkpoints)",
                                      "kwh": "kWh of work that moved"}).round(2)
        shown = moves.assign(
            time=zone_times(moves["slot_start"], tz).dt.strftime("%a %m-%d %H:%M"),
            why=derive.migration_reasons(moves, res.plan, sc),
            moved=moves["moved"].astype(str) if "moved" in moves else "checkpoint",
            transfer_s=moves["transfer_s"].astype(float).round(2),
            transfer_gb=derive.moved_gb(moves).round(2))
        cols = [(k, h.format(tz=tz)) for k, h in MIGRATION_SHOWN]
        shown = shown[[k for k, _ in cols]].rename(columns=dict(cols))
        # The headline's "migrations" count moves that carried a running job's checkpoint;
        # a job's first run away from home also moves its dataset (a data move, no
        # checkpoint yet). Both are rows here.
        moved = (moves["moved"].astype(str) if "moved" in moves
                 else pd.Series("checkpoint", index=moves.index))
        n_mig = int(moved.str.contains("checkpoint").sum())
        total = (f"**{len(moves)}** data moves in the window ({len(res.migrations)} in the "
                 f"run): **{n_mig}** migrations of a running job (its checkpoint moved; "
                 f"the Metrics tab counts these) and {len(moves) - n_mig} first moves of a "
                 f"dataset; {flow['gb'].sum():,.1f} GB moved, {flow['kwh'].sum():,.1f} kWh "
                 f"of work ran where it moved to. Times in {esc(tz)}.")
        return pn.Column(
            pn.pane.Markdown(total, css_classes=["wb-migrations-total"]),
            pn.Row(pn.pane.HoloViews(plots.flows(flow, "gb", derive.site_colors(sc)),
                                     sizing_mode="stretch_width"),
                   pn.pane.HoloViews(plots.flows(flow, "kwh", derive.site_colors(sc)),
                                     sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            data_table(routes),
            data_table(shown, pagination="local", page_size=15, header_filters=True,
                       css_classes=["wb-migrations"],
                       widths={f"time ({tz})": 128, "job": 118, "from": 88, "to": 88,
                               "why (grid in that slot)": "34%", "what moved": 132,
                               "GB moved": 72, "transfer (s)": 76},
                       formatters={"why (grid in that slot)": {"type": "textarea"}}),
            sizing_mode="stretch_width",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(run_banner(self.s), self.window,
                         pn.panel(self._content, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")
