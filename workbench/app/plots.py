"""HoloViews plots of the workbench's tables (bokeh backend), one function per figure.

Each takes a table from :mod:`workbench.app.derive` (or the cube) and returns a HoloViews
object; none reads the app state, so notebooks use them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend and its options)
import numpy as np
import pandas as pd

from workbench.app.derive import datacenter_colors, job_order

if hv.Store.current_backend != "bokeh":
    hv.Store.set_current_backend("bokeh")

WIDTH = 900


# Scrolling the page over a chart must scroll the page: no wheel zoom until the user picks it.
# No frame alignment: bokeh lines up the frames of the plots in one column, so a Gantt's
# long job labels pushed the occupancy chart's frame right and the occupancy legend cut
# ~250 px off the Gantt's right side.
CALM = {"active_tools": ["pan"], "backend_opts": {"plot.frame_align": False}}


def _colors(names: Any, colors: Mapping[str, str] | None) -> dict[str, str]:
    """``colors`` where it names every one of ``names``, else their own stable palette."""
    names = {str(n) for n in names}
    if colors is not None and names <= set(colors):
        return dict(colors)
    return datacenter_colors(names)


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


def grid_curves(grid: pd.DataFrame, variable: str, currency: str = "CNY",
                colors: Mapping[str, str] | None = None) -> hv.Overlay:
    """Price (``price_per_kwh``) or carbon (``carbon_g_per_kwh``) over time, a curve per region.

    ``grid`` is :func:`workbench.app.derive.grid_long`; the x axis is in its time zone.
    ``colors`` maps a region to its colour (:func:`workbench.app.derive.site_colors`: its
    datacenter's); default, the regions' names in turn.
    """
    label = _UNITS[variable].format(currency=currency)
    zone = _zone(grid)
    colors = _colors(grid["region"], colors)
    curves = [
        # Names in a tooltip come from the data (escaped there), never its template (HTML).
        hv.Curve(g, ("time", f"time ({zone})"), [(variable, label), "region"],
                 label=str(region)).opts(
            tools=["hover"], line_width=1.5, color=colors[str(region)],
            hover_tooltips=[("region", "@{region}"), ("time", "@time{%a %F %H:%M}"),
                            (label, f"@{{{variable}}}{{0.000}}")],
            hover_formatters={"@time": "datetime"})
        for region, g in _naive(grid).groupby("region")
    ]
    return hv.Overlay(curves).opts(
        **CALM, responsive=True, height=260, legend_position="right",
                                   title=f"{label} by region, time in {zone}")


def forecast_band(frame: pd.DataFrame, variable: str, region: str, origin: str,
                  currency: str = "CNY", tz: str = "UTC", color: str = "#1f77b4"
                  ) -> hv.Overlay:
    """The ``model`` forecast's 10-90 % band and median against the truth, hourly, in the
    region's ``color``; the y axis names the variable and its unit, the x axis spans the
    forecast's hours (no more).

    ``frame`` is :func:`workbench.forecast.scenario.band_frame` with its times wall-clock
    in ``tz`` (``origin``, the issue time, likewise).
    """
    label = _UNITS[variable].format(currency=currency)
    t = ("time", f"time ({tz})")
    band = hv.Area(frame, t, [("q10", label), ("q90", f"{label}, 90 %")],
                   label="forecast 10-90 % band").opts(alpha=0.3, color=color)
    median = hv.Curve(frame, t, ("q50", label),
                      label="forecast median").opts(color=color, line_width=2)
    truth = hv.Curve(frame, t, ("truth", label), label="truth").opts(
        color="black", line_width=1.5, tools=["hover"])
    times = pd.to_datetime(frame["time"])
    return (band * median * truth).opts(
        **CALM, responsive=True, height=260, legend_position="right", ylabel=label,
        xlim=(times.min(), times.max()) if len(times) else (None, None),
        title=f"{region}: {label}, forecast issued {origin} {tz} vs truth")


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
    unit = label[label.index("(") + 1:-1]  # "CNY/kWh", "gCO2/kWh"
    # Hour ticks every 3 h as "06h" (eight fit in a half-width plot); the colour bar carries
    # the unit, the title names region and quantity.
    return hv.HeatMap(data, [("hour", f"hour of day ({zone})"), ("day", "day")],
                      (variable, label)).opts(
        **CALM, tools=["hover"], cmap="viridis", colorbar=True, responsive=True, height=250,
        invert_yaxis=True, title=f"{region}: {label.split(' (')[0]} ({unit})",
        xticks=[(h, f"{h:02d}h") for h in range(0, 24, 3)], clabel=unit, clim=(lo, hi),
        fontsize={"title": "11pt", "xticks": "9pt", "yticks": "9pt", "clabel": "9pt"},
        colorbar_opts={"width": 12}, min_width=380, min_height=200)


def gantt(segments: pd.DataFrame, rows: list[str] | None = None, *, currency: str = "",
          tz: str = "UTC", xlim: tuple[Any, Any] | None = None,
          groups: Mapping[str, str] | None = None,
          colors: Mapping[str, str] | None = None) -> hv.Element:
    """Placements per job over time, coloured by datacenter; hover shows the configuration.

    ``rows`` are the jobs drawn, top down (default: by first start); every one gets its
    label, so the caller pages a long list. ``segments`` times are wall-clock in ``tz``.
    With ``groups`` (job -> group) a row's label starts with its group, and groups are
    separated by lines. ``colors`` maps a datacenter to its colour
    (:func:`workbench.app.derive.site_colors`, the same in every chart).
    """
    if segments.empty:
        return _empty("no job matches")
    groups = dict(groups) if groups is not None else {}
    order = rows if rows is not None else job_order(segments)
    order = [j for j in order if j in set(segments["job_id"])]
    row = {job: len(order) - 1 - i for i, job in enumerate(order)}
    colors = _colors(segments["region"], colors)
    data = segments.assign(y0=segments["job_id"].map(row).astype(float),
                           datacenter=segments["region"], config=[
                               f"{n} x {g}" for n, g in zip(segments["n_gpus"],
                                                            segments["gpu_type"], strict=True)])
    if "app" not in data:
        data = data.assign(app="")
    data = data.assign(y1=data["y0"])
    cost = f"cost ({currency})" if currency else "cost"
    vdims = ["job_id", "app", "datacenter", "config", "batch_size", "slots", "energy_kwh",
             "cost", "carbon_kg", "actions"]
    # Braces: HoloViews rewrites a dimension's label in a tooltip ("@job" of the y axis),
    # which made "@job_id" read "59_id".
    tooltips = [("job", "@{job_id} (@{app})"), ("datacenter", "@datacenter"), ("GPUs", "@config"),
                ("batch size", "@batch_size"), (f"from ({tz})", "@start{%a %m-%d %H:%M}"),
                (f"to ({tz})", "@end{%a %m-%d %H:%M}"), ("energy (kWh)", "@energy_kwh{0.00}"),
                (cost, "@cost{0,0.00}"), ("carbon (kg CO2)", "@carbon_kg{0.000}"),
                ("actions", "@actions")]
    layers: list[hv.Element] = [
        hv.Segments(g, [("start", f"time ({tz})"), ("y0", "row"), "end", "y1"], vdims,
                    label=str(dc)).opts(
            line_width=9, color=colors[str(dc)], tools=["hover"], hover_tooltips=tooltips,
            hover_formatters={"@start": "datetime", "@end": "datetime"})
        for dc, g in data.groupby("datacenter")
    ]
    n_jobs = len(order)
    labels = {job: (f"{groups.get(job, '')} · {job}" if groups and groups.get(job) else job)
              for job in order}
    ticks = [(row[job], labels[job]) for job in order]
    if groups:
        last = None
        for job in order:
            g = groups.get(job, "")
            if last is not None and g != last:
                layers.append(hv.HLine(row[job] + 0.5).opts(color="#888", line_dash="dotted",
                                                             line_width=1))
            last = g
    opts: dict[str, Any] = {}
    if xlim is not None:
        opts["xlim"] = xlim
    return hv.Overlay(layers).opts(
        **CALM, **opts, responsive=True, height=max(220, 18 * n_jobs + 110), yticks=ticks,
        # The legend above the frame in one line: at the right of a tall Gantt it sits
        # half a page down and takes the width from the bars.
        ylim=(-0.7, n_jobs - 0.3), legend_position="top", legend_cols=8,
        show_grid=True, ylabel="", fontsize={"yticks": "8pt"},
        title="Placements (job x time, colour = datacenter)")


POOL_DASHES: tuple[str, ...] = ("solid", "dotdash", "dotted", "dashdot")
"""Line styles of a datacenter's pools in the occupancy chart (its colour is the site's)."""


def occupancy(occ: pd.DataFrame, capacity: Mapping[str, int] | None = None, *,
              xlim: tuple[Any, Any] | None = None, tz: str = "UTC",
              colors: Mapping[str, str] | None = None) -> hv.Element:
    """Busy GPUs per pool (``datacenter/GPU type``) over time, a step line each in its
    datacenter's colour (``colors``, :func:`workbench.app.derive.site_colors`; the pools of
    one datacenter told apart by :data:`POOL_DASHES`), with the pool's GPU count as a thin
    dashed line of the same colour (``capacity``), labelled. ``occ`` times are wall-clock
    in ``tz``."""
    if occ.empty:
        return _empty("no GPU was busy")
    pools = sorted(occ["pool"].unique())
    sites = [str(p).split("/", 1)[0] for p in pools]
    site_color = _colors(sites, colors)
    layers: list[hv.Element] = []
    for i, (pool, site) in enumerate(zip(pools, sites, strict=True)):
        colour = site_color[site]
        dash = POOL_DASHES[sites[:i].count(site) % len(POOL_DASHES)]
        g = occ[occ["pool"] == pool]
        layers.append(hv.Curve(g, ("time", f"time ({tz})"), [("gpus_busy", "GPUs busy"),
                                                            "pool"], label=str(pool)).opts(
            interpolation="steps-post", color=colour, line_width=1.8, line_dash=dash,
            tools=["hover"],
            hover_tooltips=[("pool", "@{pool}"), ("time", "@time{%a %m-%d %H:%M}"),
                            ("GPUs busy", "@gpus_busy{0}")],
            hover_formatters={"@time": "datetime"}))
        if capacity and pool in capacity:
            layers.append(hv.HLine(capacity[pool]).opts(color=colour, line_dash="dashed",
                                                         line_width=0.8, alpha=0.6))
    opts: dict[str, Any] = {}
    if xlim is not None:
        opts["xlim"] = xlim
    caps = {pool: int(capacity[pool]) for pool in pools if capacity and pool in capacity}
    if caps:
        # Every capacity line inside the frame (an HLine does not widen the axis), each
        # labelled with its pools: pools of one size share one line.
        top = max(max(caps.values()), float(occ["gpus_busy"].max()))
        opts["ylim"] = (0, top * 1.12)
        x0 = xlim[0] if xlim is not None else occ["time"].min()
        for size in sorted(set(caps.values())):
            names = ", ".join(p for p, c in caps.items() if c == size)
            layers.append(hv.Text(x0, size, f" {size} GPUs: {names}", halign="left",
                                  valign="bottom").opts(text_font_size="8pt",
                                                        text_color="#555"))
    return hv.Overlay(layers).opts(
        **CALM, **opts, responsive=True, height=300, legend_position="right",
        title="GPU occupancy per pool (datacenter/GPU type); dashed: the pool's GPUs")


def cumulative(results: Mapping[str, Any], column: str, label: str,
               tz: str = "UTC") -> hv.Element:
    """Cumulative ``column`` (``cost`` or ``carbon_kg``) of each run over its slots."""
    curves = []
    for name, res in results.items():
        slots = res.slots
        if slots is None or slots.empty or column not in slots:
            continue
        times = pd.to_datetime(slots["time"], utc=True).dt.tz_convert(tz).dt.tz_localize(None)
        frame = pd.DataFrame({"time": times, column: slots[column].astype(float).cumsum()})
        curves.append(hv.Curve(frame, ("time", f"time ({tz})"), (column, label),
                               label=str(name)).opts(tools=["hover"]))
    if not curves:
        return _empty("no per-slot records stored")
    return hv.Overlay(curves).opts(**CALM, responsive=True, height=280,
                                   legend_position="top_left", title=f"cumulative {label}")


FLOW_QUANTITIES: dict[str, tuple[str, str]] = {
    "gb": ("GB moved (datasets and checkpoints)", "Data moved (GB)"),
    "kwh": ("kWh run after the move", "Work that moved (kWh)"),
}
"""Quantities :func:`flows` can draw: column -> (axis label, title)."""


def flows(flow: pd.DataFrame, quantity: str = "kwh",
          colors: Mapping[str, str] | None = None) -> hv.Element:
    """One quantity (``gb`` or ``kwh``) per route ``from -> to`` as horizontal bars.

    GB and kWh are not one axis: draw one figure each. Bars take the destination's colour
    (``colors``: :func:`workbench.app.derive.site_colors`).
    """
    if flow.empty:
        return _empty("no migrations in this window")
    axis, title = FLOW_QUANTITIES[quantity]
    data = flow.assign(route=flow["from_region"] + " → " + flow["to_region"]).sort_values(
        quantity)
    colors = _colors([*flow["from_region"], *flow["to_region"]], colors)
    data = data.assign(color=data["to_region"].map(colors))
    return hv.Bars(data, ("route", "route (from → to)"),
                   [(quantity, axis), "migrations", "color"]).opts(
        **CALM, invert_axes=True, responsive=True, height=max(180, 34 * len(data) + 90),
        color="color", tools=["hover"], title=title)


def _few_value_ticks(plot: Any, element: Any) -> None:  # noqa: ARG001
    """Four ticks on the value axis of horizontal bars (the bokeh figure's x axis): three
    narrow charts side by side would otherwise print overlapping numbers."""
    for axis in plot.state.xaxis:
        if hasattr(axis.ticker, "desired_num_ticks"):
            axis.ticker.desired_num_ticks = 4


def bar_colors(table: pd.DataFrame) -> list[str]:
    """The run (first row) dark, ``asap-home`` grey, ``offline`` green, the others light."""
    run = str(table["policy"].iloc[0]) if len(table) else ""
    role = {run: "#1f6f8b", "asap-home": "#9e9e9e", "offline": "#2ca02c"}
    return [role.get(str(p), "#9ecae1") for p in table["policy"]]


def compare_bars(table: pd.DataFrame, metric: str, label: str | None = None) -> hv.Bars:
    """One metric across the run (first row, dark) and its comparison policies.

    ``asap-home`` (the reference of the savings) is grey, the hindsight plan (replayed,
    ``offline``) green.
    """
    data = table.assign(color=bar_colors(table))
    # Horizontal bars: policy names stay readable however many there are.
    return hv.Bars(data.iloc[::-1], "policy", [(metric, label or metric), "color"]).opts(
        **CALM, tools=["hover"], responsive=True, height=max(160, 30 * len(data) + 80),
        invert_axes=True, color="color", title=label or metric, xlabel="", ylabel="",
        hooks=[_few_value_ticks])


def frontier(frame: pd.DataFrame, policy: str, currency: str = "") -> hv.Element:
    """Cost against carbon of ``policy``'s runs at several carbon caps (points, labelled by
    cap), beside the hindsight bound's frontier (the hindsight plan's LP at each cap: a
    dashed line no plan can go below)."""
    mine = frame[frame["policy"] == policy] if frame is not None else frame
    if mine is None or len(mine) < 2:
        return _empty("no frontier yet: run the policy at several carbon caps "
                      "(`workbench frontier`)")
    cost = f"cost ({currency})" if currency else "cost"
    x = ("carbon_kg", "carbon (kg CO2)")
    mine = frontier_labels(mine)
    met, missed = mine[~mine["missed"]], mine[mine["missed"]]
    layers = hv.Curve(mine, x, [("cost", cost)], label=policy) * hv.Scatter(
        met, x, [("cost", cost), "cap"]).opts(size=9, tools=["hover"])
    if len(missed):  # a cap the run did not keep: a red cross, not a point like the rest
        layers = layers * hv.Scatter(missed, x, [("cost", cost), "cap"],
                                     label="cap missed").opts(
            size=13, marker="x", color="#c0392b", line_width=3, tools=["hover"])
    for place, group in mine[mine["label"] != ""].groupby("place", sort=True):  # above, below
        layers = layers * hv.Labels(group, [x, ("cost", cost)], "label").opts(
            text_font_size="9pt", text_align="left", text_baseline=str(place))
    hind = frame.dropna(subset=["bound_cost", "bound_carbon_kg"]).sort_values(
        "bound_carbon_kg")
    if len(hind):
        layers = layers * hv.Curve(
            pd.DataFrame({"carbon_kg": hind["bound_carbon_kg"], "cost": hind["bound_cost"]}), x,
            [("cost", cost)], label="hindsight bound").opts(line_dash="dashed", color="grey")
    return layers.opts(**CALM, responsive=True, height=300, padding=0.15,
                       legend_position="top_right",
                       title=f"Cost-carbon frontier: {policy} at several carbon caps")


def frontier_labels(points: pd.DataFrame, near: tuple[float, float] = (0.15, 0.06)
                    ) -> pd.DataFrame:
    """The frontier's points (``carbon_kg``, ``cost``, ``carbon_cap_kg``; NaN: uncapped),
    sorted by carbon, with what the plot writes beside each: ``cap`` (``uncapped``, ``cap
    980 kg``, ``(missed)`` where the run ended above its cap), ``missed``, ``label`` and
    ``place`` (``bottom``: the label above its point, ``top``: below it).

    Points at one place (a cap that did not bind gives the uncapped run's plan) share one
    label, ``uncapped = cap 980 kg``; a point closer than ``near`` (fractions of the
    plotted carbon and cost ranges: about a label's width and height) to the previous
    label's point puts its label on the other side, so that no two labels print over each
    other."""
    pts = points.assign(_free=points["carbon_cap_kg"].notna()).sort_values(
        ["carbon_kg", "_free"]).drop(columns="_free").reset_index(drop=True)
    cap = pts["carbon_cap_kg"]
    missed = cap.notna() & (pts["carbon_kg"] > cap * (1 + 1e-9))
    text = ["uncapped" if pd.isna(c) else f"cap {c:,.0f} kg" + (" (missed)" if m else "")
            for c, m in zip(cap, missed, strict=True)]
    pts = pts.assign(cap=text, missed=missed.to_numpy(), label="", place="bottom")
    span_x = float(np.ptp(pts["carbon_kg"])) or 1.0
    span_y = float(np.ptp(pts["cost"])) or 1.0
    last, place = -1, "top"
    for i in range(len(pts)):
        if last >= 0 and abs(pts.at[i, "carbon_kg"] - pts.at[last, "carbon_kg"]) < 1e-6 * span_x \
                and abs(pts.at[i, "cost"] - pts.at[last, "cost"]) < 1e-6 * span_y:
            pts.at[last, "label"] += f" = {text[i]}"  # the same plan: one label
            continue
        close = last >= 0 and (
            abs(pts.at[i, "carbon_kg"] - pts.at[last, "carbon_kg"]) < near[0] * span_x
            and abs(pts.at[i, "cost"] - pts.at[last, "cost"]) < near[1] * span_y)
        place = ("top" if place == "bottom" else "bottom") if close else "bottom"
        pts.at[i, "label"], pts.at[i, "place"] = f" {text[i]}", place
        last = i
    return pts


def tradeoff(frame: pd.DataFrame, currency: str = "") -> hv.Element:
    """The V trade-off: cost against mean deadline backlog, one point per V.

    The backlog is the mean over slots of the queues ``Y`` summed over jobs: work behind
    each job's deadline pace, as a fraction of the job (so 1 is one whole job behind)."""
    if frame is None or len(frame) < 2:
        return _empty("no V sweep yet: run several V values (or `workbench sweep`)")
    cost = f"cost ({currency})" if currency else "cost"
    x = ("backlog", "mean backlog (jobs of work behind deadline pace)")
    curve = hv.Curve(frame, x, [("cost", cost), "V"]).opts(line_dash="dashed")
    points = hv.Scatter(frame, x, [("cost", cost), "V", ("carbon_kg", "carbon (kg)"),
                                   ("mean_jct_h", "mean JCT (h)")]).opts(
        size=9, tools=["hover"])
    # Labels up and to the right of their point, not over it.
    labels = hv.Labels(frame.assign(text=[f" V={v:g}" for v in frame["V"]]),
                       [x, ("cost", cost)], "text").opts(
        text_font_size="9pt", text_align="left", text_baseline="bottom")
    return (curve * points * labels).opts(
        **CALM, responsive=True, height=300, padding=0.15,
        title="V trade-off: cost vs mean deadline backlog")


SUPPLY_COLORS: dict[str, str] = {"renewables": "#2ca02c", "battery": "#9467bd",
                                 "grid": "#7f7f7f", "curtailed": "#c7e9c0"}
"""The supply chart's colours (renewables green, battery purple, grid grey)."""


EVENT_COLOR = "#d62728"
"""Grid events on the Supply chart: their windows shaded and their limits drawn in it."""


def supply_stack(frame: pd.DataFrame, datacenter: str, tz: str = "UTC",
                 events: pd.DataFrame | None = None) -> hv.Element:
    """One datacenter's supply over time (:func:`workbench.app.derive.supply_frame`, times
    wall-clock in ``tz``): renewables, battery discharge and grid stacked (they meet the load
    plus the battery's charging), curtailed renewable power on top in pale green, and the
    load as a black line. ``events`` (:func:`workbench.app.derive.event_windows`, times
    wall-clock in ``tz``): each grid event's window shaded and its import limit a dashed
    red line over it."""
    if frame.empty:
        return _empty("no supply recorded for this run (stored before supply existed)")
    names = ["renewables", "battery", "grid", "curtailed"]
    long = frame.melt(id_vars="time", value_vars=names, var_name="source", value_name="kw")
    areas = hv.Area.stack(hv.Overlay([
        hv.Area(long[long["source"] == n], ("time", f"time ({tz})"), ("kw", "kW"),
                label=n).opts(color=SUPPLY_COLORS[n], alpha=0.8, line_width=0)
        for n in names]))
    load = hv.Curve(frame, ("time", f"time ({tz})"), ("load", "kW"), label="load").opts(
        color="black", line_width=1.4, interpolation="steps-post", tools=["hover"],
        hover_tooltips=[("time", "@time{%a %m-%d %H:%M}"), ("load kW", "@load{0.0}")],
        hover_formatters={"@time": "datetime"})
    chart = areas * load
    if events is not None and not events.empty:
        spans = [hv.VSpan(r.start, r.end).opts(color=EVENT_COLOR, alpha=0.12, line_width=0)
                 for r in events.itertuples(index=False)]
        limits = hv.Segments(
            events.assign(y=events["limit_kw"]), [("start", f"time ({tz})"), ("y", "kW"),
                                                  "end", "limit_kw"],
            vdims=["name"], label="event limit").opts(
            color=EVENT_COLOR, line_width=2, line_dash="dashed", tools=["hover"],
            hover_tooltips=[("grid event", "@name"), ("limit kW", "@limit_kw{0.0}")])
        chart = hv.Overlay([*spans, *chart, limits])
    return chart.opts(
        **CALM, responsive=True, height=280, legend_position="right",
        title=f"{datacenter}: supply (kW) against the load"
        + ("" if events is None or events.empty else "; grid events shaded"))


def offers_heatmap(frame: pd.DataFrame, tz: str = "UTC", currency: str = "") -> hv.Element:
    """The flexibility envelope: sheddable kW by site (rows) and start hour (columns,
    wall-clock in ``tz``; :func:`workbench.app.derive.offers_frame`). Hover: the plan's
    peak, the limit the site holds and the extra cost."""
    if frame.empty:
        return _empty("no offers: compute them from a run")
    cur = f" ({currency})" if currency else ""
    sites = list(dict.fromkeys(frame["datacenter"]))
    hm = hv.HeatMap(
        frame, [("start_local", f"start ({tz})"), ("datacenter", "datacenter")],
        [("sheddable_kw", "sheddable kW"), ("planned_import_kw", "planned kW"),
         ("limit_kw", "held at kW"), ("extra_cost", f"extra cost{cur}"),
         ("flexible_jobs", "jobs paused or moved"), ("battery_kw", "battery kW")])
    return hm.opts(
        **CALM, cmap="Greens", colorbar=True, clim=(0.0, max(float(
            frame["sheddable_kw"].max()), 1e-9)), responsive=True,
        height=110 + 38 * len(sites), tools=["hover", "tap"], line_color="white",
        # The chosen offer is named beside the chart (a tapped cell is not always it).
        nonselection_alpha=1.0,
        invert_yaxis=True, title="kW each site can shed below its planned import "
        "(click a cell)", xlabel=f"event start ({tz})", ylabel="")


def cost_curve(frame: pd.DataFrame, title: str, currency: str = "") -> hv.Element:
    """One offer's cost curve (:func:`workbench.app.derive.cost_curve_frame`): kW shed
    against the extra cost, the jobs paused or moved, added cheapest per kW first."""
    if len(frame) <= 1:
        return _empty("no job there can pause or move through this window: nothing to shed")
    dims = [("kw_shed", "kW shed")], [("extra_cost", f"extra cost ({currency})")]
    return (hv.Curve(frame, *dims).opts(color="#2ca02c", line_width=2)
            * hv.Scatter(frame, *dims).opts(size=7, color="#2ca02c", tools=["hover"])
            ).opts(**CALM, responsive=True, height=260, title=title)
