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

from workbench.app import derive, plots
from workbench.app.state import V_STEPS, WorkbenchState, horizon_hours, median_work
from workbench.io.plan_csv import write_csv, write_migrations_csv, write_plan_csv
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
          "**Run**. A week of `seed3` with every comparison policy takes about a minute; "
          "the comparison runs are cached for the session.")
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


class Sidebar(_StateView):
    """Scenario, policy and knobs; the Run button, progress and messages."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        s = self.s
        self.v_slider = pn.widgets.DiscreteSlider(
            name="V (log scale)", options=list(V_STEPS),
            value=min(V_STEPS, key=lambda v: abs(math.log(v / s.V))))
        self.v_input = pn.widgets.FloatInput.from_param(s.param.V, name="V", start=1e-3)
        self.v_slider.param.watch(lambda e: setattr(s, "V", float(e.new)), "value")
        s.param.watch(self._sync_slider, "V")
        self.run_button = pn.widgets.Button(name="Run", button_type="primary",
                                            disabled=s.param.running, css_classes=["wb-run"])
        self.run_button.on_click(self._on_run)
        self.reload_button = pn.widgets.Button(
            name="Reload store", button_type="light", visible=s.param.store_error.rx.bool(),
            css_classes=["wb-reload"])
        self.reload_button.on_click(lambda _e: s.refresh_scenarios())
        self.progress = pn.indicators.Progress(
            name="progress", value=s.param.progress, max=s.param.progress_max,
            visible=s.param.running, sizing_mode="stretch_width", bar_color="primary")
        self.stage = pn.pane.Markdown(
            pn.bind(self._stage_text, s.param.stage),
            visible=s.param.running, css_classes=["wb-stage"], margin=(0, 10))
        self.caps = pn.Column()
        s.param.watch(self._caps_widgets, ["cap_mode", "scenario"])
        self._caps_widgets()

    @staticmethod
    def _stage_text(stage: str) -> str:
        return f"{stage}… The tabs stay usable meanwhile."

    def _sync_slider(self, event: Any) -> None:
        if event.new in V_STEPS and self.v_slider.value != event.new:
            self.v_slider.value = event.new

    async def _on_run(self, _event: Any) -> None:
        await self.s.run_async()

    def _caps_widgets(self, *_: Any) -> None:
        s = self.s
        if s.cap_mode == "global":
            self.caps.objects = [pn.widgets.FloatInput.from_param(s.param.carbon_cap_kg)]
        elif s.cap_mode == "per datacenter" and s.scenario is not None:
            widgets = []
            for dc in s.scenario.datacenters:
                w = pn.widgets.FloatInput(name=f"cap {dc.name} (kg)", start=0.0,
                                          value=float(s.carbon_caps_kg.get(dc.name, 0.0)))
                w.param.watch(lambda e, name=dc.name: setattr(
                    s, "carbon_caps_kg", {**s.carbon_caps_kg, name: float(e.new)}), "value")
                widgets.append(w)
            self.caps.objects = widgets
        else:
            self.caps.objects = []

    def __panel__(self) -> pn.viewable.Viewable:
        s = self.s
        return pn.Column(
            pn.widgets.Select.from_param(s.param.scenario_name),
            pn.widgets.Select.from_param(s.param.policy),
            self.v_slider, self.v_input,
            pn.widgets.Select.from_param(s.param.cap_mode), self.caps,
            pn.widgets.MultiChoice.from_param(s.param.gpu_counts),
            pn.widgets.FloatSlider.from_param(s.param.migration_threshold),
            pn.widgets.StaticText(value="Slot length (min)", margin=(5, 10, 0, 10)),
            pn.widgets.RadioButtonGroup.from_param(s.param.slot_minutes, name="Slot (min)"),
            pn.widgets.Select.from_param(s.param.forecast_mode),
            pn.widgets.FloatInput.from_param(s.param.forecast_error,
                                             visible=s.param.forecast_mode.rx() == "noisy"),
            pn.widgets.MultiChoice.from_param(s.param.baseline_policies),
            pn.widgets.Checkbox.from_param(s.param.save_runs),
            self.run_button, self.progress, self.stage,
            pn.pane.Alert(s.param.message, alert_type=s.param.message_kind,
                          visible=s.param.message.rx.bool(), css_classes=["wb-message"]),
            pn.pane.Alert(s.param.store_error, alert_type="danger",
                          visible=s.param.store_error.rx.bool(), css_classes=["wb-store-error"]),
            self.reload_button,
            sizing_mode="stretch_width",
        )


class GridView(_StateView):
    """Price and carbon over time by region (curves) and as hour-of-day heatmaps."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.zone = pn.widgets.RadioButtonGroup(name="time zone", options=["UTC"], value="UTC",
                                                css_classes=["wb-zone"])
        self.s.param.watch(self._zones, "scenario")
        self._zones()

    def _zones(self, *_: Any) -> None:
        sc = self.s.scenario
        if sc is None:
            return
        zones = derive.time_zones(sc.grid)
        # The sites' own clock by default when they share one: tariffs are set in it.
        self.zone.param.update(options=zones, value=zones[-1])

    @param.depends("state.scenario", "zone.value")
    def _plots(self) -> pn.viewable.Viewable:
        sc = self.s.scenario
        if sc is None:
            return pn.pane.Markdown("No scenario loaded: pick one in the sidebar.")
        n = sc.n_slots
        times = pd.DatetimeIndex(sc.grid["time"].values)
        pos = int(times.get_indexer([pd.Timestamp(sc.start).tz_localize(None)])[0])
        grid = derive.grid_long(sc.grid.isel(time=slice(max(pos, 0), max(pos, 0) + n)),
                                tz=self.zone.value or "UTC")
        regions = sorted(grid["region"].unique())
        zones = dict(sc.grid.attrs.get("timezones", {}))
        where = ", ".join(f"{r}: {z}" for r, z in sorted(zones.items())) or "not recorded"
        return pn.Column(
            pn.pane.Markdown(f"Slot starts in **{self.zone.value}** (regions' zones: {where}). "
                             "Hover a curve for the exact value."),
            pn.pane.HoloViews(plots.grid_curves(grid, "price_per_kwh", sc.currency),
                              sizing_mode="stretch_width"),
            pn.pane.HoloViews(plots.grid_curves(grid, "carbon_g_per_kwh"),
                              sizing_mode="stretch_width"),
            *(pn.Row(*(pn.pane.HoloViews(plots.grid_heatmap(grid, var, r, sc.currency),
                                         sizing_mode="stretch_width") for r in regions),
                     sizing_mode="stretch_width")
              for var in ("price_per_kwh", "carbon_g_per_kwh")),
            ForecastPane(state=self.state),
            sizing_mode="stretch_width",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(pn.Row(pn.pane.Markdown("**Time axis**", margin=(12, 5, 0, 10)),
                                self.zone),
                         pn.panel(self._plots, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


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
        days = [] if sc is None else sorted({
            str(t.date()) for t in pd.DatetimeIndex(sc.grid["time"].values)[:sc.n_slots]})
        self.origin = pn.widgets.Select(name="origin (00:00 UTC)", options=days,
                                        value=days[0] if days else None)
        self.button = pn.widgets.Button(name="Forecast", button_type="primary",
                                        css_classes=["wb-forecast"])
        self.out = pn.Column(sizing_mode="stretch_width")
        self.button.on_click(self._draw)

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
        self.out.objects = [pn.pane.HoloViews(
            plots.forecast_band(frame, str(self.variable.value), str(self.region.value),
                                str(self.origin.value), sc.currency),
            sizing_mode="stretch_width")]

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown("**Forecast vs truth** (mode `model`: needs >= 28 days of history "
                             "before the scenario)"),
            pn.Row(self.region, self.variable, self.origin, self.button),
            self.out, sizing_mode="stretch_width")


class PlanView(_StateView):
    """Placements per job and datacenter (Gantt-like) and GPU occupancy per pool."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.kind = pn.widgets.RadioButtonGroup(
            name="jobs", options=["all jobs", "training", "inference"], value="all jobs",
            css_classes=["wb-kind"])

    @param.depends("state.result", "kind.value")
    def _plots(self) -> pn.viewable.Viewable:
        res = self.s.result
        if res is None:
            return _no_run()
        plan = res.plan
        if self.kind.value != "all jobs" and "kind" in plan:
            plan = plan[plan["kind"] == self.kind.value]
        segments = derive.gantt_segments(plan)
        return pn.Column(
            pn.pane.HoloViews(plots.occupancy(derive.occupancy_long(res.slots)),
                              sizing_mode="stretch_width"),
            pn.Row(pn.pane.Markdown("**Gantt rows**", margin=(12, 5, 0, 10)), self.kind),
            pn.pane.Markdown(f"{segments['job_id'].nunique()} jobs, {len(segments)} segments "
                             "(a segment: consecutive slots in one datacenter and "
                             "configuration). Hover a bar for its configuration, energy, cost "
                             "and carbon; drag to zoom."),
            pn.pane.HoloViews(plots.gantt(segments), sizing_mode="stretch_width"),
            sizing_mode="stretch_width",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.panel(self._plots, sizing_mode="stretch_width")  # type: ignore[return-value]


class MigrationsView(_StateView):
    """The migration plan as a table and as flows between datacenters, filtered by time."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        lo, hi = dt.datetime(2000, 1, 1), dt.datetime(2000, 1, 2)
        self.window = pn.widgets.DatetimeRangeSlider(name="time window (UTC)", start=lo, end=hi,
                                                     value=(lo, hi), step=900_000,
                                                     sizing_mode="stretch_width")
        self.s.param.watch(self._bounds, ["scenario", "result"])
        self._bounds()

    def _bounds(self, *_: Any) -> None:
        sc = self.s.scenario
        if sc is None:
            return
        start = pd.Timestamp(sc.start).tz_localize(None).to_pydatetime()
        end = pd.Timestamp(sc.end).tz_localize(None).to_pydatetime()
        self.window.param.update(start=start, end=end, value=(start, end))

    def _selected(self) -> tuple[Any, Any]:
        lo, hi = self.window.value or (None, None)
        return (None if lo is None else pd.Timestamp(lo).tz_localize("UTC"),
                None if hi is None else pd.Timestamp(hi).tz_localize("UTC"))

    @param.depends("state.result", "window.value")
    def _content(self) -> pn.viewable.Viewable:
        res = self.s.result
        if res is None:
            return _no_run()
        lo, hi = self._selected()
        moves = derive.filter_migrations(res.migrations, lo, hi)
        flow = derive.migration_flows(res.plan, res.migrations, lo, hi)
        routes = flow.rename(columns={"from_region": "from", "to_region": "to",
                                      "gb": "GB moved", "kwh": "kWh that moved"}).round(2)
        moves = moves.assign(slot_start=moves["slot_start"].dt.strftime("%Y-%m-%d %H:%M"))
        total = (f"**{len(moves)}** migrations in the window ({len(res.migrations)} in the "
                 f"run): {flow['gb'].sum():,.1f} GB of checkpoints moved, "
                 f"{flow['kwh'].sum():,.1f} kWh of work ran where it moved to. Times in UTC.")
        return pn.Column(
            pn.pane.Markdown(total, css_classes=["wb-migrations-total"]),
            pn.Row(pn.pane.HoloViews(plots.flows(flow, "gb"), sizing_mode="stretch_width"),
                   pn.pane.HoloViews(plots.flows(flow, "kwh"), sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            pn.widgets.Tabulator(routes, disabled=True, show_index=False,
                                 sizing_mode="stretch_width"),
            pn.widgets.Tabulator(moves.round(3), disabled=True, show_index=False,
                                 pagination="local", page_size=15, sizing_mode="stretch_width",
                                 header_filters=True),
            sizing_mode="stretch_width",
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(self.window, pn.panel(self._content, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


def caps_html(metrics: dict[str, Any] | None) -> str:
    """A missed cap as a warning beside the results (a met cap as a quiet note)."""
    if not metrics:
        return ""
    out = []
    if metrics.get("carbon_cap_met") is False:
        cap, kg = float(metrics["carbon_cap_kg"]), float(metrics["carbon_kg"])
        out.append(f"<b>Carbon cap missed:</b> {kg:,.1f} kg emitted against a cap of "
                   f"{cap:,.1f} kg ({100 * (kg - cap) / cap:+.1f} %).")
    n = int(metrics.get("power_cap_violations", 0) or 0)
    if n:
        out.append(f"<b>Power cap missed</b> in {n} datacenter-slot(s) (metered above "
                   f"{metrics.get('power_cap_kw')} kW).")
    if out:
        return ('<div id="metrics-cap-warning" style="font-size:15px;padding:6px 10px;'
                'border-left:4px solid #d62728;background:#fdecea">' + " ".join(out)
                + "</div>")
    if metrics.get("carbon_cap_met") is True:
        return (f'<div id="metrics-cap-met" style="padding:4px 10px">Carbon cap met: '
                f'{float(metrics["carbon_kg"]):,.1f} of {float(metrics["carbon_cap_kg"]):,.1f}'
                " kg.</div>")
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
    return ('<div id="metrics-savings" style="font-size:15px;padding:6px 10px;'
            'border-left:4px solid #1f6f8b;background:#eef6f8">' + " ".join(parts) + "</div>")


class MetricsView(_StateView):
    """The run against the baselines and the hindsight plan; where the saving comes from;
    the V trade-off curve."""

    @param.depends("state.result", "state.baselines")
    def _headline(self) -> pn.viewable.Viewable:
        res = self.s.result
        metrics = res.metrics if res is not None else None
        currency = str(metrics.get("currency", "")) if metrics else ""
        html = headline_html(metrics, currency) + caps_html(metrics)
        if res is not None:
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
        note = (f"Not compared (unavailable or not selected): {', '.join(missing)}."
                if missing else "")
        shown = table.rename(columns={
            "cost": f"cost ({currency})", "cost_saving_pct": "cost saved vs asap-home (%)",
            "cost_vs_offline_pct": "cost above hindsight plan (%)", "carbon_kg": "carbon (kg)",
            "carbon_saving_pct": "carbon saved vs asap-home (%)", "energy_kwh": "energy (kWh)",
            "mean_jct_h": "mean JCT (h)", "p95_jct_h": "p95 JCT (h)",
            "deadline_misses": "deadline misses", "jobs_unfinished": "unfinished",
            "energy_moved_kwh": "kWh moved"})
        return pn.Column(
            pn.widgets.Tabulator(shown.round(2), disabled=True, show_index=False,
                                 frozen_columns=["policy"], sizing_mode="stretch_width",
                                 css_classes=["wb-compare"]),
            pn.pane.Markdown("First row: this run. Grey bar: asap-home, the reference of the "
                             "savings; green: offline, the hindsight plan (replayed). "
                             + note),
            pn.Row(pn.pane.HoloViews(plots.compare_bars(table, "cost", f"cost ({currency})"),
                                     sizing_mode="stretch_width"),
                   pn.pane.HoloViews(plots.compare_bars(table, "carbon_kg", "carbon (kg)"),
                                     sizing_mode="stretch_width"),
                   pn.pane.HoloViews(plots.compare_bars(table, "mean_jct_h", "mean JCT (h)"),
                                     sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            sizing_mode="stretch_width",
        )

    @param.depends("state.result")
    def _attribution(self) -> pn.viewable.Viewable:
        res = self.s.result
        att = None if res is None else res.meta.get("attribution")
        if not att:
            return pn.pane.Markdown("**Where the saving comes from:** run with asap-home under "
                                    "*Compare with* to see it.",
                                    css_classes=["wb-attribution-empty"])
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
            pn.Row(pn.pane.HoloViews(plots.attribution_waterfall(
                       att["cost"], f"saved ({currency})", f"where the saving comes from "
                       f"({currency})"), sizing_mode="stretch_width"),
                   pn.pane.HoloViews(plots.attribution_waterfall(
                       att["carbon_kg"], "saved (kg CO2)",
                       "where the carbon saving comes from (kg)"),
                       sizing_mode="stretch_width"),
                   sizing_mode="stretch_width", css_classes=["wb-attribution-chart"]),
            sizing_mode="stretch_width")

    @param.depends("state.tradeoff")
    def _tradeoff(self) -> pn.viewable.Viewable:
        frame = self.s.tradeoff
        if frame is None or len(frame) < 2:
            return pn.pane.Markdown(
                "**V trade-off:** no sweep yet. Run `lyapunov` at two or more V values "
                "(with *Save runs in the store* on) or `workbench sweep`; the curve of cost "
                "against mean backlog appears here.", css_classes=["wb-tradeoff-empty"])
        return pn.pane.HoloViews(plots.tradeoff(frame), sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(pn.panel(self._headline), pn.panel(self._compare),
                         pn.panel(self._attribution), pn.panel(self._tradeoff),
                         sizing_mode="stretch_width")


QUOTE_SHOWN: tuple[tuple[str, str], ...] = (
    ("datacenter", "datacenter"), ("gpu_type", "GPU"), ("n_gpus", "GPUs"),
    ("start", "start (UTC)"), ("finish", "finish (UTC)"), ("duration_h", "hours"),
    ("duration_lo_h", "hours, 90% interval low"), ("duration_hi_h", "hours, 90% interval high"),
    ("profile", "speed (fitted/predicted)"), ("energy_kwh", "energy (kWh)"),
    ("cost", "cost ({c})"), ("carbon_kg", "carbon (kg)"),
    ("cost_if_now", "cost if started now ({c})"), ("feasible", "meets deadline"),
    ("batch_size", "batch"), ("region", "grid region"), ("note", "note"),
)
"""Columns of the Quote tab's table, in order: the decision first, details after."""


def quote_table(options: pd.DataFrame, currency: str) -> pd.DataFrame:
    """:attr:`workbench.quote.Quote.options` as shown: readable columns and units, rounded."""
    table = options.copy()
    for col in ("start", "finish"):
        table[col] = table[col].dt.strftime("%Y-%m-%d %H:%M")
    cols = [(k, label.format(c=currency)) for k, label in QUOTE_SHOWN if k in table]
    return table[[k for k, _ in cols]].rename(columns=dict(cols)).round(2)


class QuoteView(_StateView):
    """Describe a new job and see where, on what and when it should run."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.app = pn.widgets.Select(name="application")
        self.work = pn.widgets.FloatInput(name="work (effective samples)", start=1.0)
        self.gpus = pn.widgets.IntRangeSlider(name="GPU count", start=1, end=32, value=(1, 8))
        self.arrival = pn.widgets.DatetimePicker(name="arrival (UTC; empty: horizon start)",
                                                 value=None, enable_seconds=False)
        self.deadline = pn.widgets.FloatInput(name="deadline (h after arrival)", value=24.0,
                                              start=0.25)
        self.checkpoint = pn.widgets.FloatInput(name="data/checkpoint moved if away (GB)",
                                                value=1.0, start=0.0)
        self.home = pn.widgets.Select(name="home datacenter")
        self.carbon_price = pn.widgets.FloatInput(name="carbon price (per kg)", value=0.0,
                                                  start=0.0)
        self.respect = pn.widgets.Checkbox(name="respect the latest plan's GPU occupancy")
        self.button = pn.widgets.Button(name="Quote", button_type="primary")
        self.button.on_click(self._on_quote)
        self.app.param.watch(self._default_work, "value")
        self.s.param.watch(self._choices, "scenario")
        self._choices()

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
        self.deadline.value = min(float(self.deadline.value or 24.0), horizon_hours(sc))
        start = pd.Timestamp(sc.start).tz_localize(None).to_pydatetime()
        end = pd.Timestamp(sc.end).tz_localize(None).to_pydatetime()
        self.arrival.param.update(start=start, end=end, value=None)
        self._default_work()

    def _default_work(self, *_: Any) -> None:
        sc = self.s.scenario
        if sc is not None and self.app.value:
            work = median_work(sc, self.app.value)
            self.work.value = float(f"{work:.3g}") if math.isfinite(work) else 1e6

    def spec(self) -> JobSpec:
        return JobSpec(app=self.app.value, work_samples=float(self.work.value or 0.0),
                       home=self.home.value, min_gpus=int(self.gpus.value[0]),
                       max_gpus=int(self.gpus.value[1]),
                       deadline_h=float(self.deadline.value) if self.deadline.value else None,
                       arrival=(None if self.arrival.value is None
                                else pd.Timestamp(self.arrival.value).tz_localize("UTC")
                                .to_pydatetime()),
                       checkpoint_gb=float(self.checkpoint.value or 0.0))

    def _on_quote(self, _event: Any) -> None:
        try:
            spec = self.spec()
        except (QuoteError, TypeError) as exc:
            self.s.say(f"quote: bad input: {exc}", "danger")
            return
        self.s.quote(spec, carbon_price_per_kg=float(self.carbon_price.value or 0.0),
                         respect_plan=self.respect.value)

    @param.depends("state.last_quote")
    def _result(self) -> pn.viewable.Viewable:
        q = self.s.last_quote
        if q is None:
            return pn.pane.Markdown("Describe a job and press **Quote**.")
        best = q.recommended
        if best is None:
            head = "**No option finishes before the deadline.**"
        else:
            saving = best["cost_if_now"] - best["cost"]
            head = (f"**Recommended:** {best['datacenter']} ({best['region']}), "
                    f"{best['n_gpus']} x {best['gpu_type']}, batch {best['batch_size']}, start "
                    f"{best['start']:%Y-%m-%d %H:%M} UTC, {best['duration_h']:.1f} h"
                    + (f" (predicted speed, 90% interval {best['duration_lo_h']:.1f}-"
                       f"{best['duration_hi_h']:.1f} h)" if best["profile"] == "predicted"
                       else "")
                    + " — "
                    f"{best['energy_kwh']:.2f} kWh, {best['cost']:.2f} {q.currency}, "
                    f"{best['carbon_kg']:.2f} kg CO2 (waiting saves {saving:.2f} {q.currency} "
                    "against starting now).")
        table = quote_table(q.options, q.currency)
        return pn.Column(pn.pane.Markdown(head, css_classes=["wb-quote"]),
                         pn.widgets.Tabulator(table, disabled=True, show_index=False,
                                              pagination="local", page_size=15,
                                              frozen_columns=["datacenter"],
                                              sizing_mode="stretch_width",
                                              css_classes=["wb-quote-options"]),
                         pn.pane.Markdown("\n".join(f"- {w}" for w in q.warnings)),
                         sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        form = pn.Column(self.app, self.work, self.gpus, self.arrival, self.deadline, self.home,
                         self.checkpoint, self.carbon_price, self.respect, self.button,
                         width=320)
        return pn.Row(form, pn.panel(self._result, sizing_mode="stretch_width"),
                      sizing_mode="stretch_width")


class ExportView(_StateView):
    """Download the plan and migrations CSV of the latest run (the CLI's schema)."""

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
        self.s.param.watch(self._update, "result")
        self._update()

    def _stem(self) -> str:
        res = self.s.result
        return "run" if res is None else f"{res.meta['scenario']}_{res.policy}"

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
            f"Run of **{res.policy}** on **{res.meta['scenario']}**: {len(res.plan)} plan rows, "
            f"{len(res.migrations)} migrations. Plan and migrations CSV have the CLI's "
            "columns (README: Plan and migrations CSV); the comparison CSV holds the Metrics "
            "tab's table (savings in % against asap-home).")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(pn.panel(self._summary), self.plan_download, self.migrations_download,
                         self.compare_download)


class WorkbenchApp(_StateView):
    """The whole app: the sidebar and the six tabs over one :class:`WorkbenchState`."""

    title = param.String(default="Compute–Power Fusion Planning Workbench")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        s = self.s
        self.sidebar = Sidebar(state=s)
        self.views: dict[str, Viewer] = {
            "Grid": GridView(state=s), "Plan": PlanView(state=s),
            "Migrations": MigrationsView(state=s), "Metrics": MetricsView(state=s),
            "Quote": QuoteView(state=s), "Export": ExportView(state=s),
        }
        self.tabs = pn.Tabs(*self.views.items(), dynamic=True, sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Row(pn.Column(self.sidebar, width=300), self.tabs, sizing_mode="stretch_width")

    def template(self) -> pn.template.BaseTemplate:
        """A served page: the knobs in the sidebar, the tabs in the main area."""
        return pn.template.FastListTemplate(
            title=self.title, sidebar=[self.sidebar], main=[self.tabs], sidebar_width=320,
            accent="#1f6f8b")


def create_app(db_path: str = "workbench.duckdb", **state_params: Any) -> WorkbenchApp:
    """A fresh app (its own state) for one session."""
    return WorkbenchApp(state=WorkbenchState(db_path=db_path, **state_params))
