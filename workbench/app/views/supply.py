"""The Supply tab: each datacenter's supply against its load, and the bill's breakdown."""

from __future__ import annotations

from typing import Any

import panel as pn
import param

from workbench.app import derive, plots
from workbench.app.markup import esc
from workbench.app.views.common import StateView, data_table, no_run, run_banner, zone_times


class SupplyView(StateView):
    """The run's energy supply per datacenter (renewables, battery, grid stacked against the
    load, curtailment on top) and its bill: the bill's parts per datacenter, the
    peak and when, the green share, curtailment and the battery's throughput."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.site = pn.widgets.Select(label="datacenter", width=220,
                                      css_classes=["wb-supply-site"])
        self.s.param.watch(self._sites, ["scenario", "result"])
        self._sites()

    def _sites(self, *_: Any) -> None:
        """The datacenters to choose from; sites with supply or a demand charge first."""
        sc = self.s.scenario
        if sc is None:
            self.site.param.update(options=[], value=None)
            return
        with_supply = set(sc.supply.datacenters())
        first = [d.name for d in sc.datacenters if d.name in with_supply]
        names = first + [d.name for d in sc.datacenters if d.name not in first]
        keep = self.site.value if self.site.value in names else (names[0] if names else None)
        self.site.param.update(options=names, value=keep)

    @param.depends("state.result", "state.tz")
    def _bill(self) -> pn.viewable.Viewable:
        res, sc = self.s.result, self.s.scenario
        if res is None or sc is None:
            return no_run()
        cur = str(res.metrics.get("currency", sc.currency))
        table = derive.bill_table(res.metrics, [d.name for d in sc.datacenters], cur,
                                  self.s.tz or "UTC")
        if table.empty:
            return pn.pane.Markdown("**Bill:** this run has no slot records to meter "
                                    "(its scenario is not loaded, or it was stored without "
                                    "them); run it again to see its breakdown.",
                                    css_classes=["wb-bill-empty"])
        m = res.metrics
        note = str(m.get("bill_note") or "")
        no_jobs = m.get("bill_no_jobs_total")
        lines = [f"**Bill** ({esc(cur)}), from the site meter: grid energy at its price, own "
                 "supply's settlement (*ppa*), less the export credit, plus demand and "
                 "capacity charges on each billing period's peak grid import."
                 + ("" if no_jobs is None else
                    f" The same sites running no job would pay {float(no_jobs):,.2f}; the "
                    f"plan's part, the *cost* elsewhere, is the rest: "
                    f"{float(m['bill_total']) - float(no_jobs):,.2f}.")]
        if m.get("meter_note"):
            lines.append(esc(str(m["meter_note"])))
        if note:
            lines.append(esc(note))
        lines.append(
            f"Green share {100 * float(m.get('green_share') or 0.0):.1f}% of the energy "
            f"taken in; {float(m.get('curtailed_kwh') or 0.0):,.1f} kWh of renewables "
            f"curtailed, {float(m.get('exported_kwh') or 0.0):,.1f} kWh exported; battery "
            f"throughput {float(m.get('battery_throughput_kwh') or 0.0):,.1f} kWh "
            f"({float(m.get('battery_cycles') or 0.0):.2f} full cycles), "
            f"{int(m.get('battery_soc_violations') or 0)} slots with the state of charge "
            "out of bounds; GPU power limits saved "
            f"{float(m.get('limit_saved_kwh') or 0.0):,.1f} kWh.")
        return pn.Column(pn.pane.Markdown("\n\n".join(lines)),
                         data_table(table.round(2), css_classes=["wb-bill"]),
                         sizing_mode="stretch_width")

    @param.depends("state.result", "state.tz")
    def _chart(self) -> pn.viewable.Viewable:
        return pn.panel(pn.bind(self._site_chart, self.site),  # type: ignore[return-value]
                        sizing_mode="stretch_width")

    def _site_chart(self, site: str | None) -> pn.viewable.Viewable:
        res, sc = self.s.result, self.s.scenario
        if res is None or sc is None or not site:
            return pn.pane.Markdown("")
        tz = self.s.tz or "UTC"
        frame = derive.supply_frame(res.slots, site, float(res.meta.get("slot_s", sc.slot_s)))
        if not frame.empty:
            frame = frame.assign(time=zone_times(frame["time"], tz))
        note = None
        try:  # the events the run held, from its stored caps (as `runs show` lists them)
            events = derive.event_windows(derive.run_events(res.meta), sc, site)
        except ValueError as exc:
            events, note = None, f"The run's grid events cannot be read: {esc(exc)}"
        if events is not None and not events.empty:
            events = events.assign(start=zone_times(events["start"], tz),
                                   end=zone_times(events["end"], tz))
        chart = pn.pane.HoloViews(plots.supply_stack(frame, site, tz, events),
                                  sizing_mode="stretch_width", css_classes=["wb-supply-chart"])
        if note is None:
            return chart
        return pn.Column(pn.pane.Markdown(note, styles={"color": "#b00020"}), chart,
                         sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            run_banner(self.s),
            pn.panel(self._bill, sizing_mode="stretch_width"),
            pn.pane.Markdown("**Supply against the load:** renewables, battery discharge and "
                             "grid import stacked (they meet the load and the battery's "
                             "charging), curtailed renewable power on top; the black line is "
                             "the site's load at its meter (its jobs and its idle load); a grid "
                             "event the run held is shaded red, its import limit dashed. "
                             "Times in the sidebar's *Times in*."),
            self.site,
            pn.panel(self._chart, sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
