"""The Grid tab: price and carbon by region and hour, and the model forecast against the truth."""

from __future__ import annotations

from typing import Any

import pandas as pd
import panel as pn
import param

from workbench.app import derive, plots
from workbench.app.markup import esc
from workbench.app.views.common import StateView, zone_times


class GridView(StateView):
    """Price and carbon over time by region (curves) and as hour-of-day heatmaps."""

    @param.depends("state.scenario", "state.tz")
    def _plots(self) -> pn.viewable.Viewable:
        sc = self.s.scenario
        if sc is None:
            return pn.pane.Markdown("No scenario loaded: pick one in the sidebar.")
        n = sc.n_slots
        times = pd.DatetimeIndex(sc.grid["time"].values)
        pos = int(times.get_indexer([pd.Timestamp(sc.start).tz_localize(None)])[0])
        tz = self.s.tz or "UTC"
        grid = derive.grid_long(sc.grid.isel(time=slice(max(pos, 0), max(pos, 0) + n)), tz=tz)
        regions = sorted(grid["region"].unique())
        zones = dict(sc.grid.attrs.get("timezones", {}))
        where = ", ".join(f"{esc(r)}: {esc(z)}" for r, z in sorted(zones.items())
                          ) or "not recorded"
        # One row per region, price beside carbon: each heatmap gets half the width.
        heat = [pn.pane.HoloViews(plots.grid_heatmap(grid, var, r, sc.currency),
                                  sizing_mode="stretch_width")
                for r in regions for var in ("price_per_kwh", "carbon_g_per_kwh")]
        return pn.Column(
            pn.pane.Markdown(f"Slot starts in **{esc(tz)}** (the sidebar's *Times in*; regions' "
                             f"zones: {where}). Hover a curve for the exact value."),
            pn.pane.HoloViews(plots.grid_curves(grid, "price_per_kwh", sc.currency,
                                                derive.site_colors(sc)),
                              sizing_mode="stretch_width"),
            pn.pane.HoloViews(plots.grid_curves(grid, "carbon_g_per_kwh",
                                                colors=derive.site_colors(sc)),
                              sizing_mode="stretch_width"),
            pn.pane.Markdown("**By hour of day** (columns) and day (rows): price and carbon "
                             "per region, one colour scale per quantity across regions."),
            pn.GridBox(*heat, ncols=2, sizing_mode="stretch_width",
                       css_classes=["wb-heatmaps"]),
            ForecastPane(state=self.state),
            sizing_mode="stretch_width",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        # The curves, heatmaps and forecast take seconds to build: a change of zone shows
        # Panel's loading spinner over them meanwhile (the first build, the page's).
        return pn.panel(self._plots, sizing_mode="stretch_width",  # type: ignore[return-value]
                        loading_indicator=True, css_classes=["wb-grid"])


class ForecastPane(StateView):
    """The ``model`` forecast issued at a chosen origin against the truth (Grid tab)."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        sc = self.s.scenario
        regions = [] if sc is None else [str(r) for r in sc.grid["region"].values]
        self.region = pn.widgets.Select(label="region", options=regions,
                                        value=regions[0] if regions else None)
        self.variable = pn.widgets.Select(
            label="variable", value="price_per_kwh",
            options={"price": "price_per_kwh", "carbon": "carbon_g_per_kwh"})
        self.region.width, self.variable.width = 170, 130
        self.origin = pn.widgets.Select(label="forecast issued at", width=240)
        self.button = pn.widgets.Button(label="Forecast", color="primary",
                                        css_classes=["wb-forecast"], align="end")
        self.out = pn.Column(sizing_mode="stretch_width")
        self.button.on_click(self._draw)
        self.s.param.watch(self._origins, "tz")
        self._origins()

    def _origins(self, *_: Any) -> None:
        """The model's issue times (00:00 UTC each day of the horizon), named in the
        sidebar's time zone; the value stays the UTC day."""
        sc, tz = self.s.scenario, self.s.tz or "UTC"
        days = [] if sc is None else sorted({
            str(t.date()) for t in pd.DatetimeIndex(sc.grid["time"].values)[:sc.n_slots]})
        named = {f"{pd.Timestamp(d, tz='UTC').tz_convert(tz):%a %m-%d %H:%M} {tz}": d
                 for d in days}
        keep = self.origin.value if self.origin.value in days else (days[0] if days else None)
        self.origin.param.update(options=named, value=keep)

    def _draw(self, *_: Any) -> None:
        from workbench.forecast.rolling import ForecastError
        from workbench.forecast.scenario import band_frame, fit_scenario

        sc = self.s.scenario
        if sc is None:
            return
        try:
            fm = fit_scenario(sc)
            frame = band_frame(sc, fm, pd.Timestamp(self.origin.value), str(self.region.value),
                               str(self.variable.value))
        except ForecastError as exc:
            self.out.objects = [pn.pane.Alert(esc(exc), alert_type="warning")]
            return
        tz = self.s.tz or "UTC"
        issued = pd.Timestamp(str(self.origin.value), tz="UTC").tz_convert(tz)
        self.out.objects = [pn.pane.HoloViews(
            plots.forecast_band(frame.assign(time=zone_times(frame["time"], tz)),
                                str(self.variable.value), str(self.region.value),
                                f"{issued:%a %m-%d %H:%M}", sc.currency, tz=tz,
                                color=derive.site_colors(sc).get(str(self.region.value),
                                                                 "#1f77b4")),
            sizing_mode="stretch_width")]

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown("**Forecast vs truth** (mode `model`: needs >= 28 days of history "
                             "before the scenario)"),
            pn.Row(self.region, self.variable, self.origin, self.button),
            self.out, sizing_mode="stretch_width")
