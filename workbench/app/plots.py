"""HoloViews plots of the workbench's tables (bokeh backend), one function per figure.

Each takes a table from :mod:`workbench.app.derive` (or the cube) and returns a HoloViews
object; none reads the app state, so notebooks use them as they are.
"""

from __future__ import annotations

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend and its options)
import pandas as pd

if hv.Store.current_backend != "bokeh":
    hv.Store.set_current_backend("bokeh")

WIDTH = 900


def _empty(text: str) -> hv.Text:
    return hv.Text(0, 0, text).opts(xaxis=None, yaxis=None, toolbar=None, responsive=True,
                                    height=120)


def grid_curves(grid: pd.DataFrame, variable: str, currency: str = "CNY") -> hv.Overlay:
    """Price (``price_per_kwh``) or carbon (``carbon_g_per_kwh``) over time, a curve per region."""
    label = {"price_per_kwh": f"price ({currency}/kWh)",
             "carbon_g_per_kwh": "carbon (gCO2/kWh)"}[variable]
    curves = [
        hv.Curve(g, "time", (variable, label), label=str(region)).opts(
            tools=["hover"], line_width=1.5)
        for region, g in grid.groupby("region")
    ]
    return hv.Overlay(curves).opts(responsive=True, height=260, legend_position="top_left",
                                   title=label)


def grid_heatmap(grid: pd.DataFrame, variable: str) -> hv.HeatMap:
    """Heatmap of ``variable`` over time (x) and region (y)."""
    data = grid.assign(time=pd.DatetimeIndex(grid["time"]).tz_localize(None))
    return hv.HeatMap(data, ["time", "region"], variable).opts(
        tools=["hover"], cmap="viridis", colorbar=True, responsive=True, height=200,
        title=f"{variable} by region")


def gantt(segments: pd.DataFrame) -> hv.Element:
    """Placements per job over time, coloured by datacenter; hover shows the configuration."""
    if segments.empty:
        return _empty("no job ran")
    data = segments.assign(y1=segments["job_id"])
    vdims = ["region", "gpu_type", "n_gpus", "batch_size", "slots", "energy_kwh", "cost",
             "carbon_kg", "actions"]
    layers = [
        hv.Segments(g, [("start", "time"), ("job_id", "job"), "end", "y1"], vdims,
                    label=str(region)).opts(line_width=6, tools=["hover"])
        for region, g in data.groupby("region")
    ]
    n_jobs = segments["job_id"].nunique()
    return hv.Overlay(layers).opts(
        responsive=True, height=max(240, min(14 * n_jobs + 60, 2000)),
        legend_position="right", title="Placements (job x time, colour = datacenter)")


def occupancy(occ: pd.DataFrame) -> hv.Element:
    """Busy GPUs per pool over time as a stacked area."""
    if occ.empty:
        return _empty("no GPU was busy")
    areas = [hv.Area(g, "time", ("gpus_busy", "GPUs busy"), label=str(pool))
             for pool, g in occ.groupby("pool")]
    stacked = hv.Area.stack(hv.Overlay(areas)).map(
        lambda a: a.opts(tools=["hover"], alpha=0.8), hv.Area)
    return stacked.opts(responsive=True, height=280, legend_position="right",
                        title="GPU occupancy per pool")


def flows(flow: pd.DataFrame) -> hv.Element:
    """GB and kWh moved per route (``from -> to``) as grouped bars."""
    if flow.empty:
        return _empty("no migrations in this window")
    data = flow.assign(route=flow["from_region"] + " -> " + flow["to_region"])
    long = data.melt(id_vars=["route"], value_vars=["gb", "kwh"], var_name="quantity",
                     value_name="amount")
    return hv.Bars(long, ["route", "quantity"], "amount").opts(
        tools=["hover"], responsive=True, height=280, xrotation=20,
        title="Flows between datacenters (GB of checkpoints, kWh of work that moved)")


def compare_bars(table: pd.DataFrame, metric: str) -> hv.Bars:
    """One metric across the run and its comparison policies."""
    return hv.Bars(table, "policy", metric).opts(
        tools=["hover"], responsive=True, height=240, xrotation=20, title=metric)


def tradeoff(frame: pd.DataFrame) -> hv.Element:
    """The V trade-off: cost against mean backlog, one point per V."""
    if frame is None or len(frame) < 2:
        return _empty("no V sweep yet: run several V values (or `workbench sweep`)")
    curve = hv.Curve(frame, "backlog", ["cost", "V"]).opts(line_dash="dashed")
    points = hv.Scatter(frame, "backlog", ["cost", "V", "carbon_kg", "mean_jct_h"]).opts(
        size=9, tools=["hover"])
    labels = hv.Labels(frame.assign(text=[f"V={v:g}" for v in frame["V"]]),
                       ["backlog", "cost"], "text").opts(text_font_size="9pt", yoffset=0)
    return (curve * points * labels).opts(
        responsive=True, height=300, padding=0.15,
        title="V trade-off: cost vs mean deadline backlog",
        xlabel="mean backlog (fraction of work)", ylabel="cost")
