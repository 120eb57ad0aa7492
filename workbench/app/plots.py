"""HoloViews plots of the workbench's tables (bokeh backend), one function per figure.

Each takes a table from :mod:`workbench.app.derive` (or the cube) and returns a HoloViews
object; none reads the app state, so notebooks use them as they are.
"""

from __future__ import annotations

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend and its options)
import pandas as pd

from workbench.app.derive import datacenter_colors, job_order

if hv.Store.current_backend != "bokeh":
    hv.Store.set_current_backend("bokeh")

WIDTH = 900


# Scrolling the page over a chart must scroll the page: no wheel zoom until the user picks it.
CALM = {"active_tools": ["pan"]}


def _empty(text: str) -> hv.Text:
    return hv.Text(0, 0, text).opts(xaxis=None, yaxis=None, toolbar=None, responsive=True,
                                    height=120)


_UNITS = {"price_per_kwh": "price ({currency}/kWh)", "carbon_g_per_kwh": "carbon (gCO2/kWh)"}


def _zone(grid: pd.DataFrame) -> str:
    tz = getattr(grid["time"].dt, "tz", None)
    return str(tz) if tz is not None else "UTC"


def _naive(grid: pd.DataFrame) -> pd.DataFrame:
    """Bokeh draws wall-clock times: drop the zone after converting (the label keeps it)."""
    times = grid["time"]
    if getattr(times.dt, "tz", None) is not None:
        times = times.dt.tz_localize(None)
    return grid.assign(time=times)


def grid_curves(grid: pd.DataFrame, variable: str, currency: str = "CNY") -> hv.Overlay:
    """Price (``price_per_kwh``) or carbon (``carbon_g_per_kwh``) over time, a curve per region.

    ``grid`` is :func:`workbench.app.derive.grid_long`; the x axis is in its time zone.
    """
    label = _UNITS[variable].format(currency=currency)
    zone = _zone(grid)
    colors = datacenter_colors(grid["region"])
    curves = [
        hv.Curve(g, ("time", f"time ({zone})"), (variable, label), label=str(region)).opts(
            tools=["hover"], line_width=1.5, color=colors[str(region)],
            hover_tooltips=[("region", str(region)), ("time", "@time{%a %F %H:%M}"),
                            (label, f"@{{{variable}}}{{0.000}}")],
            hover_formatters={"@time": "datetime"})
        for region, g in _naive(grid).groupby("region")
    ]
    return hv.Overlay(curves).opts(
        **CALM, responsive=True, height=260, legend_position="right",
                                   title=f"{label} by region, time in {zone}")


def forecast_band(frame: pd.DataFrame, variable: str, region: str, origin: str,
                  currency: str = "CNY") -> hv.Overlay:
    """The ``model`` forecast's 10-90 % band and median against the truth, hourly (UTC).

    ``frame`` is :func:`workbench.forecast.scenario.band_frame`.
    """
    label = _UNITS[variable].format(currency=currency)
    band = hv.Area(frame, ("time", "time (UTC)"), ["q10", "q90"],
                   label="forecast 10-90 % band").opts(alpha=0.3, color="#1f77b4")
    median = hv.Curve(frame, ("time", "time (UTC)"), ("q50", label),
                      label="forecast median").opts(color="#1f77b4", line_width=2)
    truth = hv.Curve(frame, ("time", "time (UTC)"), ("truth", label), label="truth").opts(
        color="black", line_width=1.5, tools=["hover"])
    return (band * median * truth).opts(
        **CALM, responsive=True, height=260, legend_position="right",
        title=f"{region}: {label}, forecast issued {origin} UTC vs truth")


def grid_heatmap(grid: pd.DataFrame, variable: str, region: str,
                 currency: str = "CNY") -> hv.Element:
    """Heatmap of ``variable`` in ``region`` over hour of day (x) and day (y).

    Daily patterns (tariff windows, solar dips) line up as columns. The colour range spans
    every region of ``grid``, so heatmaps of several regions side by side compare.
    """
    label = _UNITS[variable].format(currency=currency)
    zone = _zone(grid)
    data = _naive(grid)
    lo, hi = float(data[variable].min()), float(data[variable].max())
    data = data[data["region"] == region]
    if data.empty:
        return _empty(f"no grid data for {region}")
    data = data.assign(hour=data["time"].dt.hour + data["time"].dt.minute / 60.0,
                       day=data["time"].dt.strftime("%m-%d %a"))
    data = data.groupby(["day", "hour"], as_index=False)[variable].mean()
    return hv.HeatMap(data, [("hour", f"hour of day ({zone})"), "day"],
                      (variable, label)).opts(
        **CALM, tools=["hover"], cmap="viridis", colorbar=True, responsive=True, height=230,
        invert_yaxis=True, title=f"{region}: {label}", xticks=list(range(0, 24, 3)),
        clabel=label, clim=(lo, hi))


def gantt(segments: pd.DataFrame) -> hv.Element:
    """Placements per job over time, coloured by datacenter; hover shows the configuration.

    Rows are jobs by first start (top: earliest); one colour per datacenter
    (:func:`workbench.app.derive.datacenter_colors`).
    """
    if segments.empty:
        return _empty("no job ran")
    order = job_order(segments)
    row = {job: len(order) - 1 - i for i, job in enumerate(order)}
    colors = datacenter_colors(segments["region"])
    data = segments.assign(y0=segments["job_id"].map(row).astype(float),
                           datacenter=segments["region"], config=[
                               f"{n} x {g}" for n, g in zip(segments["n_gpus"],
                                                            segments["gpu_type"], strict=True)])
    data = data.assign(y1=data["y0"])
    vdims = ["job_id", "datacenter", "config", "batch_size", "slots", "energy_kwh", "cost",
             "carbon_kg", "actions"]
    tooltips = [("job", "@job_id"), ("datacenter", "@datacenter"), ("GPUs", "@config"),
                ("batch", "@batch_size"), ("from", "@start{%a %F %H:%M}"),
                ("to", "@end{%a %F %H:%M}"), ("energy (kWh)", "@energy_kwh{0.00}"),
                ("cost", "@cost{0.00}"), ("carbon (kg)", "@carbon_kg{0.000}"),
                ("actions", "@actions")]
    layers = [
        hv.Segments(g, [("start", "time (UTC)"), ("y0", "job"), "end", "y1"], vdims,
                    label=str(dc)).opts(
            line_width=7, color=colors[str(dc)], tools=["hover"], hover_tooltips=tooltips,
            hover_formatters={"@start": "datetime", "@end": "datetime"})
        for dc, g in data.groupby("datacenter")
    ]
    n_jobs = len(order)
    step = max(1, n_jobs // 60)
    ticks = [(row[job], job) for job in order[::step]]
    return hv.Overlay(layers).opts(
        **CALM, responsive=True, height=max(260, min(12 * n_jobs + 90, 1800)), yticks=ticks,
        ylim=(-1, n_jobs), legend_position="top", legend_cols=len(colors), show_grid=True,
        title="Placements (job x time, colour = datacenter)")


def occupancy(occ: pd.DataFrame) -> hv.Element:
    """Busy GPUs per pool (``datacenter/GPU type``) over time as a stacked area."""
    if occ.empty:
        return _empty("no GPU was busy")
    areas = [hv.Area(g, ("time", "time (UTC)"), ("gpus_busy", "GPUs busy"), label=str(pool))
             for pool, g in occ.groupby("pool")]
    stacked = hv.Area.stack(hv.Overlay(areas)).map(
        lambda a: a.opts(tools=["hover"], alpha=0.8), hv.Area)
    return stacked.opts(
        **CALM, responsive=True, height=300, legend_position="right",
                        title="GPU occupancy per pool (datacenter/GPU type)")


FLOW_QUANTITIES: dict[str, tuple[str, str]] = {
    "gb": ("checkpoint GB moved", "Checkpoint data moved (GB)"),
    "kwh": ("kWh of work that followed", "Work that moved (kWh run at the destination)"),
}
"""Quantities :func:`flows` can draw: column -> (axis label, title)."""


def flows(flow: pd.DataFrame, quantity: str = "kwh") -> hv.Element:
    """One quantity (``gb`` or ``kwh``) per route ``from -> to`` as horizontal bars.

    GB and kWh are not one axis: draw one figure each. Bars take the destination's colour.
    """
    if flow.empty:
        return _empty("no migrations in this window")
    axis, title = FLOW_QUANTITIES[quantity]
    data = flow.assign(route=flow["from_region"] + " → " + flow["to_region"]).sort_values(
        quantity)
    colors = datacenter_colors([*flow["from_region"], *flow["to_region"]])
    data = data.assign(color=data["to_region"].map(colors))
    return hv.Bars(data, ("route", "route (from → to)"),
                   [(quantity, axis), "migrations", "color"]).opts(
        **CALM, invert_axes=True, responsive=True, height=max(180, 34 * len(data) + 90),
        color="color", tools=["hover"], title=title)


def compare_bars(table: pd.DataFrame, metric: str, label: str | None = None) -> hv.Bars:
    """One metric across the run (first row, dark) and its comparison policies.

    ``asap-home`` (the reference of the savings) is grey, the hindsight plan (replayed,
    ``offline``) green.
    """
    run = str(table["policy"].iloc[0]) if len(table) else ""
    role = {run: "#1f6f8b", "asap-home": "#9e9e9e", "offline": "#2ca02c"}
    data = table.assign(color=[role.get(str(p), "#9ecae1") for p in table["policy"]])
    return hv.Bars(data, "policy", [(metric, label or metric), "color"]).opts(
        **CALM, tools=["hover"], responsive=True, height=260, xrotation=20, color="color",
        title=label or metric)


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
        **CALM, responsive=True, height=300, padding=0.15,
        title="V trade-off: cost vs mean deadline backlog",
        xlabel="mean backlog (fraction of work)", ylabel="cost")


ATTRIBUTION_LABELS: tuple[tuple[str, str], ...] = (
    ("efficiency", "efficiency (less energy)"), ("temporal", "temporal (cheaper hours)"),
    ("spatial", "spatial (cheaper sites)"), ("movement", "movement (transfers, restarts)"),
)
"""The parts of a saving (:func:`workbench.metrics.attribute_savings`), in waterfall order."""


def attribution_waterfall(parts: dict[str, float], unit: str, title: str) -> hv.Element:
    """A waterfall of a saving against asap-home: each part a floating bar from the running
    total (green saves, red costs), then the total saving (dark)."""
    if not parts:
        return _empty("no attribution: run asap-home as a comparison")
    rows = []
    level = 0.0
    for i, (key, label) in enumerate(ATTRIBUTION_LABELS):
        v = float(parts.get(key, 0.0))
        rows.append({"x0": i + 0.1, "x1": i + 0.9, "y0": level, "y1": level + v,
                     "part": label, "value": v, "color": "#2ca02c" if v >= 0 else "#d62728"})
        level += v
    n = len(ATTRIBUTION_LABELS)
    rows.append({"x0": n + 0.1, "x1": n + 0.9, "y0": 0.0, "y1": level, "part": "saving",
                 "value": level, "color": "#1f6f8b"})
    frame = pd.DataFrame(rows)
    ticks = [(i + 0.5, label.split(" (")[0]) for i, (_, label) in enumerate(ATTRIBUTION_LABELS)]
    ticks.append((n + 0.5, "saving"))
    return hv.Rectangles(frame, ["x0", "y0", "x1", "y1"], ["part", "value", "color"]).opts(
        **CALM, color="color", line_color=None, tools=["hover"], responsive=True, height=280,
        xticks=ticks, xlabel="", ylabel=unit, title=title)
