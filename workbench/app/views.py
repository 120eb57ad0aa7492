"""Thin Panel views over :class:`~workbench.app.state.WorkbenchState`: one ``Viewer`` per tab.

Views hold widgets and layout only; every number they show comes from the state object or
from :mod:`workbench.app.derive`. ``WorkbenchApp`` puts them together (sidebar and tabs) and
:func:`create_app` builds one per browser session.
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import math
from typing import Any

import pandas as pd
import panel as pn
import param
from panel.viewable import Viewer

from workbench import runs as stored_runs
from workbench.app import derive, plots
from workbench.app.state import (
    V_STEPS,
    WorkbenchState,
    check_knob,
    horizon_hours,
    median_work,
)
from workbench.io.plan_csv import write_csv, write_migrations_csv, write_plan_csv
from workbench.policies import policy_knobs
from workbench.quote import JobSpec, QuoteError

log = logging.getLogger(__name__)

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


NO_RUN = ("**No run yet.** Pick a scenario, a policy and its knobs in the sidebar and press "
          "**Run**, or load a stored run in the **Runs** tab. A week of `seed3` takes "
          "10-40 s per policy (the hindsight plan longest); progress and time left show "
          "above the tabs, and comparison runs are kept for every session of the server.")
"""What a tab that needs a run shows before the first one."""


def _no_run() -> pn.pane.Markdown:
    return pn.pane.Markdown(NO_RUN, css_classes=["wb-empty"], sizing_mode="stretch_width")


class _StateView(Viewer):
    """A view over one :class:`WorkbenchState` (``s`` is it, typed)."""

    state = param.ClassSelector(class_=WorkbenchState)

    @property
    def s(self) -> WorkbenchState:
        state = self.state
        if not isinstance(state, WorkbenchState):
            raise TypeError("a view needs state=WorkbenchState(...)")
        return state


ERROR_STYLE = {"color": "#b00020", "font-size": "12px"}


def _error_pane(state: WorkbenchState, knob: str) -> pn.pane.Markdown:
    """The reason a typed knob is refused, right under its field (hidden while valid)."""
    def reason(errors: dict[str, str]) -> str:
        return errors.get(knob, "")

    def shown(*_: Any) -> bool:  # refused and in use (a lookahead run has no V to refuse)
        return knob in state.blocking_errors()

    return pn.pane.Markdown(
        pn.bind(reason, state.param.input_errors),
        visible=pn.bind(shown, state.param.input_errors, state.param.policy,  # type: ignore[arg-type]
                        state.param.cap_mode, state.param.forecast_mode),
        styles=ERROR_STYLE, margin=(0, 10, 4, 10),
        css_classes=[f"wb-error-{knob.split(':')[0]}"])


def typed_input(name: str, value: str, **params: Any) -> pn.widgets.TextInput:
    """A text field whose ``value_input`` (what is typed, key by key) starts equal to
    ``value``: readers use ``value_input`` alone, so what is read is what is shown."""
    return pn.widgets.TextInput(name=name, value=value, value_input=value, **params)


TABLE_CSS = (".tabulator-col-title {white-space: normal !important; "
             "text-overflow: clip !important; overflow-wrap: normal}")
"""Table headers wrap onto two lines instead of being cut to ``cost ...``."""


def table_titles(frame: pd.DataFrame) -> dict[str, str]:
    """Header titles where a column name needs one: a time zone may break after its "/"
    (``stored (Asia/Shanghai)`` wraps instead of being cut)."""
    return {str(c): str(c).replace("/", "/\u200b") for c in frame.columns if "/" in str(c)}


def data_table(frame: pd.DataFrame, **params: Any) -> pn.widgets.Tabulator:
    """A read-only table that fits the width (no side-scrolling) with wrapped headers."""
    opts: dict[str, Any] = {"disabled": True, "show_index": False, "layout": "fit_columns",
                            "sizing_mode": "stretch_width", "stylesheets": [TABLE_CSS],
                            "configuration": {"columnDefaults": {"headerWordWrap": True}},
                            "titles": table_titles(frame)}
    opts.update(params)
    return pn.widgets.Tabulator(frame, **opts)


def _zone_times(times: pd.Series, tz: str) -> pd.Series:
    """UTC timestamps as wall-clock times in ``tz`` (naive: bokeh draws them as they are)."""
    t = pd.to_datetime(times, utc=True)
    return t.dt.tz_convert(tz).dt.tz_localize(None)


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


def run_banner(state: WorkbenchState) -> pn.pane.HTML:
    """:func:`banner_html` kept up to date with the state."""
    def html(info: dict[str, Any], running: bool, result: Any, tz: str) -> str:
        warnings = derive.run_warnings(result) if result is not None else []
        return banner_html(info, running, warnings, tz)

    return pn.pane.HTML(pn.bind(html, state.param.run_info, state.param.running,
                                state.param.result, state.param.tz),
                        sizing_mode="stretch_width", margin=(0, 5, 8, 5))


def fit_window(window: pn.widgets.DatetimeRangeSlider, state: WorkbenchState,
               label: str) -> None:
    """Set a time-window slider to the scenario's horizon in the chosen time zone."""
    sc = state.scenario
    if sc is None:
        return
    tz = state.tz or "UTC"
    start = pd.Timestamp(sc.start).tz_convert(tz).tz_localize(None).to_pydatetime()
    end = pd.Timestamp(sc.end).tz_convert(tz).tz_localize(None).to_pydatetime()
    window.param.update(start=start, end=end, value=(start, end), name=f"{label} ({tz})")


class Sidebar(_StateView):
    """Scenario, time zone, policy and knobs (each checked as typed); Run and messages."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        s = self.s
        # V and the migration threshold only where the policy takes them (the look-ahead
        # planner takes neither): a field the run would ignore is not offered.
        def takes(knob: str) -> Any:
            def offered(policy: str) -> bool:
                return knob in policy_knobs(policy)
            return pn.bind(offered, s.param.policy)

        def note(policy: str) -> str:
            return f"*{policy}* takes no V or migration threshold."

        def takes_neither(policy: str) -> bool:
            return not ({"V", "migration_threshold"} & set(policy_knobs(policy)))

        self.v_slider = pn.widgets.DiscreteSlider(
            name="V (log scale)", options=sorted(set(V_STEPS) | {float(s.V)}),
            value=float(s.V), visible=takes("V"))
        self.v_input = typed_input("V", f"{s.V:g}", css_classes=["wb-v"], visible=takes("V"))
        self.threshold = pn.widgets.FloatSlider.from_param(
            s.param.migration_threshold, visible=takes("migration_threshold"))
        self.knobs_note = pn.pane.Markdown(
            pn.bind(note, s.param.policy),
            visible=pn.bind(takes_neither, s.param.policy),  # type: ignore[arg-type]
            styles={"color": "#555", "font-size": "12px"}, margin=(0, 10),
            css_classes=["wb-knobs-note"])
        self.v_input.param.watch(lambda e: s.enter("V", e.new), "value_input")
        self.v_slider.param.watch(self._from_slider, "value")
        s.param.watch(self._sync_v, "V")
        self.error_text = pn.pane.Markdown("", visible=False, styles=ERROR_STYLE,
                                           css_classes=["wb-run-blocked"], margin=(0, 10))
        self.run_button = pn.widgets.Button(name="Run", button_type="primary",
                                            css_classes=["wb-run"])
        self.run_button.on_click(self._on_run)
        self.reload_button = pn.widgets.Button(
            name="Reload store", button_type="light", visible=s.param.store_error.rx.bool(),
            css_classes=["wb-reload"])
        self.reload_button.on_click(lambda _e: s.refresh_scenarios())
        self.forecast_error = typed_input(
            "Forecast error (relative, e.g. 0.1)", f"{s.forecast_error:g}",
            visible=s.param.forecast_mode.rx() == "noisy")
        self.forecast_error.param.watch(lambda e: s.enter("forecast_error", e.new),
                                        "value_input")
        self.caps = pn.Column(sizing_mode="stretch_width")
        s.param.watch(self._caps_widgets, ["cap_mode", "scenario"])
        s.param.watch(self._gate, ["input_errors", "running", "cap_mode", "forecast_mode",
                                   "policy", "scenario"])
        self._caps_widgets()
        self._gate()

    def _from_slider(self, event: Any) -> None:
        self.s.V = float(event.new)
        self.s.input_errors = {k: v for k, v in self.s.input_errors.items() if k != "V"}

    def _sync_v(self, event: Any) -> None:
        value, _ = check_knob("V", self.v_input.value_input or "")
        if value != event.new:
            self.v_input.param.update(value=f"{event.new:g}", value_input=f"{event.new:g}")
        if self.v_slider.value != event.new:
            # The slider shows the V in use: a typed V off the log steps joins its options.
            options = sorted(set(V_STEPS) | {float(event.new)})
            self.v_slider.param.update(options=options, value=float(event.new))

    def _gate(self, *_: Any) -> None:
        """Run only on what the operator sees: disabled while any shown field is refused."""
        errors = self.s.blocking_errors()
        self.run_button.disabled = bool(errors) or self.s.running or self.s.scenario is None
        self.error_text.param.update(
            object="Run is disabled until the fields marked in red are fixed." if errors
            else "", visible=bool(errors))

    async def _on_run(self, _event: Any) -> None:
        await self.s.run_async()

    def _caps_widgets(self, *_: Any) -> None:
        s = self.s
        widgets: list[Any] = []
        if s.cap_mode == "global":
            w = typed_input("Carbon cap, all sites (kg CO2, horizon total)",
                            f"{s.carbon_cap_kg:g}", css_classes=["wb-cap"])
            w.param.watch(lambda e: s.enter("carbon_cap_kg", e.new), "value_input")
            widgets += [w, _error_pane(s, "carbon_cap_kg")]
        elif s.cap_mode == "per datacenter" and s.scenario is not None:
            for dc in s.scenario.datacenters:
                knob = f"carbon_cap_kg:{dc.name}"
                w = typed_input(f"Carbon cap {dc.name} (kg CO2)",
                                f"{float(s.carbon_caps_kg.get(dc.name, 0.0)):g}")
                w.param.watch(lambda e, knob=knob: s.enter(knob, e.new), "value_input")
                widgets += [w, _error_pane(s, knob)]
        self.caps.objects = widgets

    def __panel__(self) -> pn.viewable.Viewable:
        s = self.s
        return pn.Column(
            pn.widgets.Select.from_param(s.param.scenario_name),
            pn.widgets.Select.from_param(s.param.tz, css_classes=["wb-tz"]),
            pn.widgets.Select.from_param(s.param.policy),
            self.v_slider, self.v_input, _error_pane(s, "V"), self.knobs_note,
            pn.widgets.Select.from_param(s.param.cap_mode), self.caps,
            pn.widgets.MultiChoice.from_param(s.param.gpu_counts),
            self.threshold,
            pn.widgets.StaticText(value="Slot length (min)", margin=(5, 10, 0, 10)),
            pn.widgets.RadioButtonGroup.from_param(s.param.slot_minutes, name="Slot (min)"),
            pn.widgets.Select.from_param(s.param.forecast_mode),
            self.forecast_error, _error_pane(s, "forecast_error"),
            pn.widgets.MultiChoice.from_param(s.param.baseline_policies),
            pn.widgets.Checkbox.from_param(s.param.save_runs),
            self.run_button, self.error_text,
            pn.pane.Alert(s.param.message, alert_type=s.param.message_kind,
                          visible=s.param.message.rx.bool(), css_classes=["wb-message"]),
            pn.pane.Alert(s.param.store_error, alert_type="danger",
                          visible=s.param.store_error.rx.bool(), css_classes=["wb-store-error"]),
            self.reload_button,
            sizing_mode="stretch_width",
        )


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


class ProgressPanel(_StateView):
    """Progress of the running computation in the main area, with a Cancel button."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.cancel_button = pn.widgets.Button(name="Cancel", button_type="warning",
                                               css_classes=["wb-cancel"], width=100)
        self.cancel_button.on_click(lambda _e: self.s.cancel())

    @param.depends("state.progress_rows", "state.stage")
    def _html(self) -> pn.viewable.Viewable:
        import time

        return pn.pane.HTML(progress_html(self.s.progress_rows, time.monotonic())
                            + f'<div style="color:#555;font-size:12px">{self.s.stage}</div>',
                            sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Row(pn.panel(self._html, sizing_mode="stretch_width"), self.cancel_button,
                      visible=self.s.param.running, sizing_mode="stretch_width",
                      styles={"background": "#f7fbfc", "border": "1px solid #cfe3ea",
                              "border-radius": "6px"}, css_classes=["wb-progress-panel"])


class GridView(_StateView):
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
        where = ", ".join(f"{r}: {z}" for r, z in sorted(zones.items())) or "not recorded"
        # One row per region, price beside carbon: each heatmap gets half the width.
        heat = [pn.pane.HoloViews(plots.grid_heatmap(grid, var, r, sc.currency),
                                  sizing_mode="stretch_width")
                for r in regions for var in ("price_per_kwh", "carbon_g_per_kwh")]
        return pn.Column(
            pn.pane.Markdown(f"Slot starts in **{tz}** (the sidebar's *Times in*; regions' "
                             f"zones: {where}). Hover a curve for the exact value."),
            pn.pane.HoloViews(plots.grid_curves(grid, "price_per_kwh", sc.currency),
                              sizing_mode="stretch_width"),
            pn.pane.HoloViews(plots.grid_curves(grid, "carbon_g_per_kwh"),
                              sizing_mode="stretch_width"),
            pn.pane.Markdown("**By hour of day** (columns) and day (rows): price and carbon "
                             "per region, one colour scale per quantity across regions."),
            pn.GridBox(*heat, ncols=2, sizing_mode="stretch_width",
                       css_classes=["wb-heatmaps"]),
            ForecastPane(state=self.state),
            sizing_mode="stretch_width",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.panel(self._plots, sizing_mode="stretch_width")  # type: ignore[return-value]


GANTT_PAGE = 60
"""Jobs per Gantt page: each row keeps its label at any scenario size."""


class ForecastPane(_StateView):
    """The ``model`` forecast issued at a chosen origin against the truth (Grid tab)."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        sc = self.s.scenario
        regions = [] if sc is None else [str(r) for r in sc.grid["region"].values]
        self.region = pn.widgets.Select(name="region", options=regions,
                                        value=regions[0] if regions else None)
        self.variable = pn.widgets.Select(
            name="variable", value="price_per_kwh",
            options={"price": "price_per_kwh", "carbon": "carbon_g_per_kwh"})
        self.region.width, self.variable.width = 170, 130
        self.origin = pn.widgets.Select(name="forecast issued at", width=240)
        self.button = pn.widgets.Button(name="Forecast", button_type="primary",
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
            self.out.objects = [pn.pane.Alert(str(exc), alert_type="warning")]
            return
        tz = self.s.tz or "UTC"
        issued = pd.Timestamp(str(self.origin.value), tz="UTC").tz_convert(tz)
        self.out.objects = [pn.pane.HoloViews(
            plots.forecast_band(frame.assign(time=_zone_times(frame["time"], tz)),
                                str(self.variable.value), str(self.region.value),
                                f"{issued:%a %m-%d %H:%M}", sc.currency, tz=tz),
            sizing_mode="stretch_width")]

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown("**Forecast vs truth** (mode `model`: needs >= 28 days of history "
                             "before the scenario)"),
            pn.Row(self.region, self.variable, self.origin, self.button),
            self.out, sizing_mode="stretch_width")


class PlanView(_StateView):
    """GPU occupancy per pool against capacity, and a Gantt of placements: grouped by
    datacenter or pool, filtered by kind and job, zoomed to a window, paged."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.kind = pn.widgets.RadioButtonGroup(
            name="jobs", options=["all jobs", "training", "inference"], value="all jobs",
            css_classes=["wb-kind"])
        self.group = pn.widgets.RadioButtonGroup(
            name="group", options=["datacenter", "pool", "none"], value="datacenter",
            css_classes=["wb-group"])
        self.search = pn.widgets.TextInput(name="Find jobs (id contains; several: a, b)",
                                           placeholder="e.g. bert, 012", css_classes=["wb-search"],
                                           width=260)
        lo, hi = dt.datetime(2000, 1, 1), dt.datetime(2000, 1, 2)
        self.window = pn.widgets.DatetimeRangeSlider(name="Window", start=lo, end=hi,
                                                     value=(lo, hi), step=900_000,
                                                     sizing_mode="stretch_width")
        self.page = pn.widgets.IntInput(name="Page", value=1, start=1, width=90)
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
            return _no_run()
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
            start=lambda f: _zone_times(f["start"], tz), end=lambda f: _zone_times(f["end"], tz),
            app=lambda f: f["job_id"].map(apps).fillna(""),
            group=lambda f: f["job_id"].map(groups).fillna(""))
        occ = derive.occupancy_long(res.slots)
        if not occ.empty:
            occ = occ.assign(time=_zone_times(occ["time"], tz))
        xlim = (pd.Timestamp(lo), pd.Timestamp(hi))
        note = (f"**{len(order)}** jobs match ({segments['job_id'].nunique()} in the run), "
                f"page {page} of {pages} ({GANTT_PAGE} jobs a page, every row labelled). A bar "
                "is a segment: consecutive slots in one datacenter and configuration; hover it "
                f"for job, GPUs, energy, cost ({sc.currency}) and carbon. Times in {tz}.")
        return pn.Column(
            pn.pane.HoloViews(plots.occupancy(occ, derive.pool_capacity(sc), xlim=xlim,
                                              tz=tz),
                              sizing_mode="stretch_width"),
            pn.pane.Markdown(note, css_classes=["wb-gantt-note"]),
            pn.pane.HoloViews(plots.gantt(visible, rows, currency=sc.currency, tz=tz,
                                          xlim=xlim, groups=groups),
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


MIGRATION_SHOWN: tuple[tuple[str, str], ...] = (
    ("time", "time ({tz})"), ("job_id", "job"), ("from_region", "from"), ("to_region", "to"),
    ("why", "why (grid in that slot)"), ("checkpoint_gb", "GB moved"),
    ("transfer_min", "transfer (min)"),
)
"""Columns of the Migrations tab's table: key and header."""


class MigrationsView(_StateView):
    """The migration plan as a table and as flows between datacenters, filtered by time."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        lo, hi = dt.datetime(2000, 1, 1), dt.datetime(2000, 1, 2)
        self.window = pn.widgets.DatetimeRangeSlider(name="Time window", start=lo, end=hi,
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
            return _no_run()
        tz = self.s.tz or "UTC"
        lo, hi = self._selected()
        moves = derive.filter_migrations(res.migrations, lo, hi)
        flow = derive.migration_flows(res.plan, res.migrations, lo, hi)
        routes = flow.rename(columns={"from_region": "from", "to_region": "to",
                                      "gb": "GB moved (datasets and checkpoints)",
                                      "kwh": "kWh of work that moved"}).round(2)
        shown = moves.assign(
            time=_zone_times(moves["slot_start"], tz).dt.strftime("%a %m-%d %H:%M"),
            why=derive.migration_reasons(moves, res.plan, sc),
            transfer_min=(moves["transfer_s"].astype(float) / 60.0).round(1),
            checkpoint_gb=moves["checkpoint_gb"].astype(float).round(2))
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
                 f"of work ran where it moved to. Times in {tz}.")
        return pn.Column(
            pn.pane.Markdown(total, css_classes=["wb-migrations-total"]),
            pn.Row(pn.pane.HoloViews(plots.flows(flow, "gb"), sizing_mode="stretch_width"),
                   pn.pane.HoloViews(plots.flows(flow, "kwh"), sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            data_table(routes),
            data_table(shown, pagination="local", page_size=15, header_filters=True,
                       css_classes=["wb-migrations"],
                       widths={f"time ({tz})": 132, "job": 118, "from": 92, "to": 92,
                               "why (grid in that slot)": "36%", "GB moved": 84,
                               "transfer (min)": 84},
                       formatters={"why (grid in that slot)": {"type": "textarea"}}),
            sizing_mode="stretch_width",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(run_banner(self.s), self.window,
                         pn.panel(self._content, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


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


COMPARE_SHOWN: tuple[tuple[str, str], ...] = (
    ("policy", "policy"), ("cost", "cost ({c})"), ("cost_saving_pct", "cost saved (%)"),
    ("cost_vs_offline_pct", "above hindsight plan (%)"), ("carbon_kg", "carbon (kg)"),
    ("carbon_saving_pct", "carbon saved (%)"), ("energy_kwh", "energy (kWh)"),
    ("mean_jct_h", "mean JCT (h)"), ("deadline_misses", "misses"),
    ("jobs_unfinished", "not done"), ("migrations", "moves"),
)
"""Columns of the Metrics tab's comparison table (all fit without side-scrolling); the
comparison CSV keeps every column of :func:`workbench.app.derive.compare_table`."""


class MetricsView(_StateView):
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
            return _no_run()
        currency = str(res.metrics.get("currency", ""))
        table = derive.compare_table(res.policy, res.metrics, self.s.baselines)
        missing = [b for b in self.s.baseline_policies
                   if b not in self.s.baselines and b != res.policy]
        note = (f"Not compared (unavailable, not selected or not stored for this run's "
                f"settings): {', '.join(missing)}." if missing else "")
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
            pn.pane.HTML(
                '<div style="display:flex;flex-wrap:wrap;gap:8px">'
                + plots.compare_bars_html(table, "cost", f"cost ({currency})")
                + plots.compare_bars_html(table, "carbon_kg", "carbon (kg CO2)", "{:,.1f}")
                + plots.compare_bars_html(table, "mean_jct_h", "mean JCT (h)")
                + "</div>", sizing_mode="stretch_width", css_classes=["wb-compare-bars"]),
            sizing_mode="stretch_width",
        )

    @param.depends("state.result")
    def _attribution(self) -> pn.viewable.Viewable:
        res = self.s.result
        att = None if res is None else res.meta.get("attribution")
        if not att:
            why = None if res is None else res.meta.get("attribution_missing")
            text = (f"**Where the saving comes from:** {why}." if why else
                    "**Where the saving comes from:** run with asap-home under *Compare "
                    "with* to see it.")
            return pn.pane.Markdown(text, css_classes=["wb-attribution-empty"])
        currency = str(res.metrics.get("currency", "")) if res is not None else ""
        bound = res.meta.get("bound") if res is not None else None
        note = ("Saving against asap-home split exactly into efficiency (less energy for the "
                "same work: batch, GPU type and count), temporal (cheaper hours at home), "
                "spatial (cheaper datacenters) and movement (transfers and restarts, a cost).")
        if bound:
            note += (f" Hindsight bound ({bound['kind']}): {float(bound['cost']):,.2f} "
                     f"{currency}, {float(bound['carbon_kg']):,.1f} kg.")
        return pn.Column(
            pn.pane.HTML(f'<div id="attribution-note">{note}</div>',
                         css_classes=["wb-attribution"], sizing_mode="stretch_width"),
            pn.pane.HTML(
                '<div style="display:flex;flex-wrap:wrap;gap:16px">'
                + plots.attribution_waterfall(att["cost"], f"saved ({currency})",
                                              f"where the saving comes from ({currency})")
                + plots.attribution_waterfall(att["carbon_kg"], "saved (kg CO2)",
                                              "where the carbon saving comes from (kg)",
                                              "{:+,.1f}")
                + "</div>", sizing_mode="stretch_width", css_classes=["wb-attribution-chart"]),
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


RUNS_SHOWN: tuple[tuple[str, str], ...] = (
    ("created", "stored ({tz})"), ("name", "name"), ("policy", "policy"),
    ("knobs", "knobs"), ("cost", "cost ({c})"), ("carbon_kg", "carbon (kg)"),
    ("deadline_misses", "misses"), ("jobs_unfinished", "not done"), ("run_id", "run"),
)
"""Columns of the Runs tab's table."""


class RunsView(_StateView):
    """Stored runs of the scenario: load, rename, delete, tick to compare side by side."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.show_baselines = pn.widgets.Checkbox(name="show comparison (baseline) runs",
                                                  value=False)
        self.table = data_table(pd.DataFrame(), selectable="checkbox", pagination="local",
                           page_size=12, css_classes=["wb-runs"])
        self.load_button = pn.widgets.Button(name="Load", button_type="primary",
                                             css_classes=["wb-runs-load"], width=90)
        self.compare_button = pn.widgets.Button(name="Compare ticked", button_type="success",
                                                css_classes=["wb-runs-compare"], width=140)
        self.new_name = pn.widgets.TextInput(placeholder="new name", width=180,
                                             css_classes=["wb-runs-name"])
        self.rename_button = pn.widgets.Button(name="Rename", width=90,
                                               css_classes=["wb-runs-rename"])
        self.delete_button = pn.widgets.Button(name="Delete ticked", button_type="danger",
                                               width=120, css_classes=["wb-runs-delete"])
        self.hint = pn.pane.Markdown("", css_classes=["wb-runs-hint"])
        self.load_button.on_click(self._load)
        self.compare_button.on_click(self._compare)
        self.rename_button.on_click(self._rename)
        self.delete_button.on_click(self._delete)
        self.s.param.watch(self._refresh, ["runs_table", "tz", "run_info"])
        self.show_baselines.param.watch(self._refresh, "value")
        self._ids: list[str] = []
        self._armed: list[str] = []  # runs a first Delete press asked to confirm
        self._refresh()

    def _refresh(self, *_: Any) -> None:
        runs = self.s.runs_table
        tz = self.s.tz or "UTC"
        if runs is None or runs.empty:
            self._ids = []
            self.table.value = pd.DataFrame(columns=[h for _, h in RUNS_SHOWN])
            return
        if not self.show_baselines.value:
            runs = runs[runs["status"] != "baseline"]
        runs = runs.reset_index(drop=True)
        self._ids = list(runs["run_id"])
        currency = next((c for c in runs["currency"] if c), "")
        frame = runs.assign(
            created=_zone_times(runs["created_utc"], tz).dt.strftime("%m-%d %H:%M"),
            name=runs["name"].fillna(""),
            knobs=[stored_runs.knobs_text(r).split(" · ", 1)[-1] for r in
                   runs.to_dict("records")],
            cost=runs["cost"].round(2), carbon_kg=runs["carbon_kg"].round(1),
            deadline_misses=runs["deadline_misses"].astype("Int64"),
            jobs_unfinished=runs["jobs_unfinished"].astype("Int64"))
        cols = [(k, h.format(tz=tz, c=currency)) for k, h in RUNS_SHOWN]
        stored = dict(cols)["created"]
        shown = frame[[k for k, _ in cols]].rename(columns=dict(cols))
        # Fixed widths sum to ~75 % of the 1366 px window's table, the knobs take the rest.
        self.table.param.update(value=shown, titles=table_titles(shown),
                                selection=[i for i, r in enumerate(self._ids)
                                           if r in self.s.compare_ids],
                                widths={stored: 112, "name": 100, "run": 112, "policy": 92,
                                        dict(cols)["cost"]: 88, dict(cols)["carbon_kg"]: 84,
                                        "misses": 80, "not done": 74, "knobs": "19%"},
                                formatters={"knobs": {"type": "textarea"},
                                            "name": {"type": "textarea"}})

    def ticked(self) -> list[str]:
        return [self._ids[i] for i in self.table.selection if i < len(self._ids)]

    def _need(self, n: int) -> list[str] | None:
        ids = self.ticked()
        if len(ids) < n:
            self.hint.object = f"Tick {'a run' if n == 1 else f'{n} or more runs'} first."
            return None
        self.hint.object = ""
        return ids

    def _load(self, _e: Any) -> None:
        ids = self._need(1)
        if ids:
            self.s.load_run(ids[0])
            self.hint.object = f"Loaded run `{ids[0]}`: the other tabs show it."

    def _compare(self, _e: Any) -> None:
        ids = self._need(2)
        if ids:
            self.s.compare_ids = ids

    def _rename(self, _e: Any) -> None:
        ids = self._need(1)
        if ids:
            self.s.rename_run(ids[0], self.new_name.value or "")

    def _delete(self, _e: Any) -> None:
        """First press: say what would go; a second press on the same ticks deletes."""
        ids = self._need(1)
        if not ids:
            return
        if self._armed != ids:
            self._armed = ids
            self.hint.object = (f"Press **Delete ticked** again to delete {len(ids)} stored "
                                f"run(s) for good: {', '.join(f'`{i}`' for i in ids)}.")
            return
        self._armed = []
        self.s.delete_runs(ids)
        self.hint.object = f"Deleted {len(ids)} run(s) from the store."

    @param.depends("state.compare_ids")
    def _comparison(self) -> pn.viewable.Viewable:
        ids = list(self.s.compare_ids)
        if len(ids) < 2:
            return pn.pane.Markdown("Tick two or more runs and press **Compare ticked** to see "
                                    "their metrics and plans side by side.")
        from workbench.store import StoreError

        try:
            with self.s.store() as store:
                sc = self.s.scenario
                frame = stored_runs.compare_frame(store, ids,
                                                  {sc.name: sc} if sc is not None else None)
                results = {col: stored_runs.load_result(store, rid)
                           for col, rid in zip(frame.columns, ids, strict=True)}
        except StoreError as exc:
            return pn.pane.Markdown(f"Cannot compare: {exc}")
        shown = frame.map(lambda v: v if isinstance(v, str) else (
            "–" if v is None or (isinstance(v, float) and not math.isfinite(v))
            else f"{v:,.2f}" if isinstance(v, float) else f"{v:,d}"))
        tz = self.s.tz or "UTC"
        currency = next((str(r.metrics.get("currency", "")) for r in results.values()), "")
        return pn.Column(
            pn.pane.Markdown(f"**{len(ids)} runs side by side**"),
            data_table(shown.reset_index(names="metric"), css_classes=["wb-runs-compared"],
                       formatters={c: {"type": "textarea"} for c in ["metric", *shown.columns]},
                       widths={"metric": 300}),
            pn.pane.Markdown(
                "*Saving against asap-home* splits each run's saving against the asap-home "
                "run stored with it (else the newest one with the same slot and forecast) "
                "into efficiency (less energy, same work), temporal (cheaper hours at home), "
                "spatial (cheaper datacenters) and movement (transfers and restarts, a cost), "
                "as the Metrics tab's waterfall does.", css_classes=["wb-runs-attribution"]),
            pn.Row(pn.pane.HoloViews(plots.cumulative(results, "cost", f"cost ({currency})",
                                                      tz), sizing_mode="stretch_width"),
                   pn.pane.HoloViews(plots.cumulative(results, "carbon_kg", "carbon (kg)", tz),
                                     sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            pn.pane.Markdown("Energy each run drew per datacenter (kWh), from its plan:"),
            data_table(derive.energy_by_datacenter(
                {k: r.plan for k, r in results.items()}).round(1)),
            sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown("Stored runs of this scenario, newest first. Tick runs to load "
                             "(the first ticked), rename, delete or compare them."),
            self.show_baselines, self.table,
            pn.Row(self.load_button, self.compare_button, self.new_name, self.rename_button,
                   self.delete_button),
            self.hint, pn.panel(self._comparison, sizing_mode="stretch_width"),
            sizing_mode="stretch_width")


QUOTE_SHOWN: tuple[tuple[str, str], ...] = (
    ("best", ""), ("datacenter", "datacenter"), ("gpu_type", "GPU"), ("n_gpus", "GPUs"),
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
        table[col] = _zone_times(table[col], tz).dt.strftime("%m-%d %H:%M")
    best = bool(len(table)) and bool(table["feasible"].iloc[0])
    table["best"] = ["★ best" if best and i == 0 else "" for i in range(len(table))]
    if {"duration_lo_h", "duration_hi_h"} <= set(table.columns):
        # The predicted profile's run-time interval; a fitted profile's is its point.
        table["hours_interval"] = [f"{lo:.1f}-{hi:.1f}" for lo, hi in
                                   zip(table["duration_lo_h"], table["duration_hi_h"],
                                       strict=True)]
    cols = [(k, label.format(c=currency, tz=tz)) for k, label in QUOTE_SHOWN if k in table]
    return table[[k for k, _ in cols]].rename(columns=dict(cols)).round(2)


class QuoteView(_StateView):
    """Describe a new job and see where, on what and when it should run."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.app = pn.widgets.Select(name="application")
        self.work = typed_input("work (effective samples)", "", css_classes=["wb-work"])
        self.gpus = pn.widgets.IntRangeSlider(name="GPU count", start=1, end=32, value=(1, 8))
        self.arrival = pn.widgets.DatetimePicker(name="arrival (empty: horizon start)",
                                                 value=None, enable_seconds=False)
        self.deadline = typed_input("deadline (h after arrival)", "24",
                                    css_classes=["wb-deadline"])
        self.checkpoint = typed_input("data/checkpoint moved if away (GB)", "1")
        self.home = pn.widgets.Select(name="home datacenter")
        self.carbon_price = typed_input("carbon price (currency per kg CO2)", "0")
        self.order = pn.widgets.RadioButtonGroup(name="best is", options=list(derive.QUOTE_ORDERS),
                                                 value="cheapest", css_classes=["wb-quote-order"])
        self.respect = pn.widgets.Checkbox(name="respect the latest plan's GPU occupancy")
        self.button = pn.widgets.Button(name="Quote", button_type="primary",
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
        self.errors.object = "\n\n".join(errors.values())
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
        self.arrival.param.update(start=start, end=end, value=None, name=f"arrival ({tz})",
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
                     respect_plan=self.respect.value)

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
                    f"{best['datacenter']}, {best['n_gpus']} x {best['gpu_type']}, start "
                    f"{start:%a %m-%d %H:%M} {tz}, {best['duration_h']:.1f} h{interval} — "
                    f"{best['cost']:,.2f} {q.currency}, {best['carbon_kg']:,.2f} kg CO2, "
                    f"{best['energy_kwh']:,.1f} kWh. Fastest option: {fastest['n_gpus']} x "
                    f"{fastest['gpu_type']} in {fastest['datacenter']}, "
                    f"{fastest['duration_h']:.1f} h.")
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
                               # Key columns wide enough for their values; the note
                               # wraps in what is left.
                               widths={"": 58, "datacenter": 98, "GPU": 84, "GPUs": 52,
                                       f"start ({tz})": 106, f"finish ({tz})": 106,
                                       "hours": 56, "hours, 90% interval": 72,
                                       f"cost ({q.currency})": 62, "carbon (kg)": 66,
                                       "energy (kWh)": 66, "meets deadline": 84},
                               formatters={"note": {"type": "textarea"}, **{
                                   c: {"type": "money", "precision": 2, "symbol": ""}
                                   for c in fixed}},
                               text_align={c: "right" for c in fixed}),
                         pn.pane.Markdown("\n".join(f"- {w}" for w in q.warnings)),
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
                      self.order, self.respect, self.button, self.errors, width=235))
        return pn.Column(form, pn.panel(self._result, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


class ExportView(_StateView):
    """Download the plan and migrations CSV of the shown run (the CLI's schema)."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.plan_download = pn.widgets.FileDownload(
            callback=self._plan_csv, filename="plan.csv", label="Download plan CSV",
            button_type="primary", disabled=True, css_classes=["wb-download-plan"])
        self.migrations_download = pn.widgets.FileDownload(
            callback=self._migrations_csv, filename="migrations.csv",
            label="Download migrations CSV", disabled=True,
            css_classes=["wb-download-migrations"])
        self.compare_download = pn.widgets.FileDownload(
            callback=self._compare_csv, filename="comparison.csv",
            label="Download comparison CSV", disabled=True,
            css_classes=["wb-download-compare"])
        self.s.param.watch(self._update, ["result", "run_info"])
        self._update()

    def _stem(self) -> str:
        res = self.s.result
        if res is None:
            return "run"
        rid = self.s.run_info.get("run_id")
        return f"{res.meta['scenario']}_{res.policy}" + (f"_{rid}" if rid else "")

    def _update(self, *_: Any) -> None:
        has = self.s.result is not None
        stem = self._stem()
        self.plan_download.param.update(disabled=not has, filename=f"{stem}_plan.csv")
        self.migrations_download.param.update(disabled=not has,
                                              filename=f"{stem}_migrations.csv")
        self.compare_download.param.update(disabled=not has,
                                           filename=f"{stem}_comparison.csv")

    def _plan_csv(self) -> io.StringIO:
        buf = io.StringIO()
        if self.s.result is not None:
            write_plan_csv(self.s.result.plan, buf)
        buf.seek(0)
        return buf

    def _migrations_csv(self) -> io.StringIO:
        buf = io.StringIO()
        if self.s.result is not None:
            write_migrations_csv(self.s.result.migrations, buf)
        buf.seek(0)
        return buf

    def _compare_csv(self) -> io.StringIO:
        buf = io.StringIO()
        res = self.s.result
        if res is not None:
            write_csv(derive.compare_table(res.policy, res.metrics, self.s.baselines), buf)
        buf.seek(0)
        return buf

    @param.depends("state.result")
    def _summary(self) -> pn.viewable.Viewable:
        res = self.s.result
        if res is None:
            return _no_run()
        return pn.pane.Markdown(
            f"Run of **{res.policy}** on **{res.meta['scenario']}**: {len(res.plan):,d} plan "
            f"rows, {len(res.migrations):,d} migrations. Plan and migrations CSV have the CLI's "
            "columns (README: Plan and migrations CSV; `workbench runs export RUN` writes the "
            "same); the comparison CSV holds the Metrics tab's table (savings in % against "
            "asap-home).")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(run_banner(self.s), pn.panel(self._summary), self.plan_download,
                         self.migrations_download, self.compare_download,
                         sizing_mode="stretch_width")


class WorkbenchApp(_StateView):
    """The whole app: the sidebar, the progress panel and the tabs over one state."""

    title = param.String(default="Compute–Power Fusion Planning Workbench")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        s = self.s
        self.sidebar = Sidebar(state=s)
        self.progress = ProgressPanel(state=s)
        self.views: dict[str, Viewer] = {
            "Metrics": MetricsView(state=s), "Plan": PlanView(state=s),
            "Migrations": MigrationsView(state=s), "Runs": RunsView(state=s),
            "Grid": GridView(state=s), "Quote": QuoteView(state=s),
            "Export": ExportView(state=s),
        }
        # A tab's content is built when it is first shown (a placeholder until then), so
        # the first page costs the Metrics tab only.
        self._slots = {name: pn.Column(sizing_mode="stretch_width") for name in self.views}
        self.tabs = pn.Tabs(*self._slots.items(), dynamic=True, sizing_mode="stretch_width")
        self.tabs.param.watch(self._show, "active")
        self._show()

    def _show(self, *_: Any) -> None:
        name = list(self.views)[self.tabs.active]
        slot = self._slots[name]
        if not slot.objects:
            slot.objects = [self.views[name].__panel__()]

    def open_tab(self, name: str) -> None:
        """Show tab ``name`` (building it on first use)."""
        self.tabs.active = list(self.views).index(name)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Row(pn.Column(self.sidebar, width=300),
                      pn.Column(self.progress, self.tabs, sizing_mode="stretch_width"),
                      sizing_mode="stretch_width")

    def template(self) -> pn.viewable.Viewable:
        """A served page: a title bar, the knobs in a sidebar, progress and tabs in the main
        area, each scrolling on its own (so Run stays in reach while a long tab scrolls).

        Plain Panel layouts rather than a Panel template: on the 2-core box a
        FastListTemplate's scripts and styles cost 1.5-2 s of every first page
        (``bench/app_pages.py`` serves such a floor page beside the app).
        """
        header = pn.pane.HTML(
            f'<div class="wb-title" style="font-size:22px;padding:10px 18px">{self.title}</div>',
            styles={"background": "#1f6f8b", "color": "white"}, sizing_mode="stretch_width",
            margin=0, height=50)
        below = "calc(100vh - 50px)"  # the window under the title bar
        side = pn.Column(self.sidebar, width=320, scroll=True, margin=0,
                         styles={"height": below, "background": "#f7f9fa",
                                 "border-right": "1px solid #dde3e6"},
                         css_classes=["wb-sidebar"])
        main = pn.Column(self.progress, self.tabs, scroll=True, sizing_mode="stretch_width",
                         margin=(0, 0, 0, 12), styles={"height": below},
                         css_classes=["wb-main"])
        return pn.Column(header, pn.Row(side, main, sizing_mode="stretch_width", margin=0),
                         sizing_mode="stretch_width", margin=0)


def create_app(db_path: str = "workbench.duckdb", **state_params: Any) -> WorkbenchApp:
    """A fresh app (its own state) for one session."""
    return WorkbenchApp(state=WorkbenchState(db_path=db_path, **state_params))
