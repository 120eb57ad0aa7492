"""The Flexibility tab: what each site can shed, when, at what cost; an offer planned as an
event and shown kept."""

from __future__ import annotations

import io
from typing import Any

import holoviews as hv
import pandas as pd
import panel as pn
import param

from workbench.app import derive, plots
from workbench.app.markup import esc
from workbench.app.views.common import StateView, data_table, no_run, run_banner
from workbench.events import event_line
from workbench.flexibility import OFFER_COLUMNS
from workbench.io.plan_csv import write_csv

EVERY_SITE = "every site"

ABOUT = (
    "**Flexibility envelope** of the shown run (the plan the operator runs anyway, read as "
    "`workbench flexibility` reads it): for each site and each event start, how many kW "
    "below its own peak the site can hold its grid import for the event's hours, announced "
    "that many hours ahead, by pausing jobs whose deadlines leave room, with no deadline "
    "missed, and the extra cost. Click a cell (or pick site and start below) for its cost "
    "curve; **Plan this event** plans the offer as a grid event (as `plan --grid-event` "
    "does) and shows whether it is kept.")


class FlexibilityView(StateView):
    """The envelope's heatmap (sheddable kW by site and start), the chosen offer's cost
    curve, the offer planned as a grid event with its report, and the offers as CSV."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        s = self.s
        self.hours = pn.widgets.FloatInput.from_param(s.param.flex_hours, width=120,
                                                      css_classes=["wb-flex-hours"])
        self.notice = pn.widgets.FloatInput.from_param(s.param.flex_notice_h, width=120,
                                                       css_classes=["wb-flex-notice"])
        self.site = pn.widgets.Select(label="Sites", width=180, css_classes=["wb-flex-site"])
        self.compute_button = pn.widgets.Button(label="Compute offers", color="primary",
                                                width=160, css_classes=["wb-flex-compute"])
        self.compute_button.on_click(self._on_compute)
        self.pick_site = pn.widgets.Select(label="Offer of", width=180,
                                           css_classes=["wb-flex-pick-site"])
        self.pick_start = pn.widgets.Select(label="starting", width=230,
                                            css_classes=["wb-flex-pick-start"])
        self.plan_button = pn.widgets.Button(label="Plan this event", color="primary",
                                             width=160, disabled=True,
                                             css_classes=["wb-flex-plan"])
        self.plan_button.on_click(self._on_plan)
        self.download = pn.widgets.FileDownload(
            callback=self._offers_csv, filename="offers.csv", label="Download offers CSV",
            disabled=True, css_classes=["wb-download-offers"])
        self.site.param.watch(self._site_chosen, "value")
        self.pick_site.param.watch(self._picked, "value")
        self.pick_start.param.watch(self._picked, "value")
        s.param.watch(self._sites, ["scenario"])
        s.param.watch(self._offers_changed, ["offers", "tz"])
        s.param.watch(self._pick_changed, ["flex_pick"])
        s.param.watch(self._gate, ["flex_pick", "running", "offers"])
        self._sites()
        self._offers_changed()

    # -- widgets follow the state ------------------------------------------------------
    def _sites(self, *_: Any) -> None:
        sc = self.s.scenario
        names = [] if sc is None else [d.name for d in sc.datacenters]
        keep = self.s.flex_site if self.s.flex_site in names else EVERY_SITE
        if keep == EVERY_SITE:
            self.s.flex_site = ""  # a site of the previous scenario
        self.site.param.update(options=[EVERY_SITE, *names], value=keep)

    def _site_chosen(self, event: Any) -> None:
        self.s.flex_site = "" if event.new == EVERY_SITE else str(event.new)

    def _offers_changed(self, *_: Any) -> None:
        table = self.s.offers
        has = table is not None and not table.empty
        frm = self.s.offers_from
        self.download.param.update(disabled=not has, filename=(
            f"offers_{frm.get('hours', 0):g}h_{frm.get('notice_hours', 0):g}h.csv"))
        sites = [] if table is None else list(dict.fromkeys(table["datacenter"]))
        self.pick_site.param.update(options=sites, value=self.s.flex_pick.get(
            "datacenter", sites[0] if sites else None))
        self._pick_changed()

    def _pick_changed(self, *_: Any) -> None:
        """The selectors show the chosen offer (a click on the heatmap chose it)."""
        table, pick = self.s.offers, self.s.flex_pick
        if table is None or table.empty or not pick:
            self.pick_start.param.update(options={}, value=None)
            return
        rows = table[table["datacenter"] == pick["datacenter"]]
        tz = self.s.tz or "UTC"
        labels = {f"{pd.Timestamp(t).tz_convert(tz):%a %m-%d %H:%M}": str(t)
                  for t in rows["start"]}
        if self.pick_site.value != pick["datacenter"]:
            self.pick_site.value = pick["datacenter"]
        self.pick_start.param.update(options=labels, value=pick["start"])

    def _picked(self, *_: Any) -> None:
        site, start = self.pick_site.value, self.pick_start.value
        pick = self.s.flex_pick
        if site is None:
            return
        if site != pick.get("datacenter"):  # a new site: its offer nearest the chosen start
            self.s.pick_offer(str(site), pick.get("start") or start or "1970-01-01")
        elif start is not None and start != pick.get("start"):
            self.s.pick_offer(str(site), start)

    def _gate(self, *_: Any) -> None:
        offer = self.s.picked_offer()
        self.plan_button.disabled = (self.s.running or offer is None
                                     or float(offer["sheddable_kw"]) <= 0)

    async def _on_compute(self, _event: Any) -> None:
        self.compute_button.param.update(loading=True, disabled=True)
        try:
            await self.s.compute_offers_async()
        finally:
            self.compute_button.param.update(loading=False, disabled=False)

    async def _on_plan(self, _event: Any) -> None:
        await self.s.run_async(self.s.compute_event)

    def _offers_csv(self) -> io.StringIO:
        buf = io.StringIO()
        if self.s.offers is not None:
            write_csv(self.s.offers[list(OFFER_COLUMNS)], buf)
        buf.seek(0)
        return buf

    # -- panes -----------------------------------------------------------------------------
    def _tapped(self, x: Any = None, y: Any = None) -> None:
        """A click on the heatmap: ``x`` the start (wall-clock in the zone shown), ``y`` the
        site."""
        if x is None or y is None:
            return
        when = pd.Timestamp(x, unit="ms") if isinstance(x, int | float) else pd.Timestamp(x)
        if when.tzinfo is None:
            when = when.tz_localize(self.s.tz or "UTC", ambiguous=True,
                                    nonexistent="shift_forward")
        self.s.pick_offer(str(y), when)

    @param.depends("state.offers", "state.tz")
    def _heatmap(self) -> pn.viewable.Viewable:
        table = self.s.offers
        if table is None:
            return pn.pane.Markdown(
                "Set the event's hours and notice and press **Compute offers**.",
                css_classes=["wb-flex-empty"])
        tz = self.s.tz or "UTC"
        currency = self.s.scenario.currency if self.s.scenario is not None else ""
        hm = plots.offers_heatmap(derive.offers_frame(table, tz), tz, currency)
        if isinstance(hm, hv.HeatMap):
            hv.streams.Tap(source=hm, x=None, y=None).add_subscriber(self._tapped)
        frm = self.s.offers_from
        note = (f"Offers of **{esc(frm.get('label', ''))}**: {frm.get('hours', 0):g}-hour "
                f"events at {frm.get('notice_hours', 0):g} h notice, "
                f"{int((table['sheddable_kw'] > 0).sum())} of {len(table)} with kW to shed "
                f"(largest {float(table['sheddable_kw'].max()):,.1f} kW).")
        return pn.Column(pn.pane.Markdown(note, css_classes=["wb-flex-note"]),
                         pn.pane.HoloViews(hm, sizing_mode="stretch_width",
                                           css_classes=["wb-flex-heatmap"]),
                         sizing_mode="stretch_width")

    @param.depends("state.flex_pick", "state.offers", "state.tz")
    def _offer(self) -> pn.viewable.Viewable:
        offer = self.s.picked_offer()
        if offer is None:
            return pn.pane.Markdown("")
        tz = self.s.tz or "UTC"
        cur = self.s.scenario.currency if self.s.scenario is not None else ""
        start = pd.Timestamp(offer["start"]).tz_convert(tz)
        text = (f"**{esc(offer['datacenter'])}** from {start:%a %m-%d %H:%M} ({esc(tz)}) for "
                f"{float(offer['hours']):g} h at {float(offer['notice_hours']):g} h notice: "
                f"planned peak {float(offer['planned_import_kw']):,.1f} kW, held at "
                f"{float(offer['limit_kw']):,.1f} kW, so **{float(offer['sheddable_kw']):,.1f}"
                f" kW shed** by pausing or moving {int(offer['flexible_jobs'])} job(s)"
                + (f" and {float(offer['battery_kw']):,.1f} kW from the battery"
                   if float(offer.get("battery_kw", 0.0) or 0.0) > 0 else "")
                + f", extra cost {float(offer['extra_cost']):,.2f} {esc(cur)}.")
        curve = derive.cost_curve_frame(self.s.picked_curve())
        title = f"{offer['datacenter']} from {start:%a %H:%M}: kW shed against extra cost"
        return pn.Column(pn.pane.Markdown(text, css_classes=["wb-flex-offer"]),
                         pn.pane.HoloViews(plots.cost_curve(curve, title, cur),
                                           sizing_mode="stretch_width",
                                           css_classes=["wb-flex-curve"]),
                         sizing_mode="stretch_width")

    @param.depends("state.result", "state.tz")
    def _report(self) -> pn.viewable.Viewable:
        res, sc = self.s.result, self.s.scenario
        if res is None or sc is None:
            return no_run()
        try:
            rows = derive.event_rows(res, sc)
        except ValueError as exc:
            return pn.pane.Markdown(f"The shown run's grid events cannot be read: {esc(exc)}",
                                    styles={"color": "#b00020"})
        if not rows:
            return pn.pane.Markdown("The shown run holds no grid event.",
                                    css_classes=["wb-event-report"])
        cur = str(res.metrics.get("currency", sc.currency))
        # The line the CLI prints (plan, runs show), from the same report rows.
        lines = [esc(event_line(r, cur)) + "." for r in rows]
        table = derive.event_table(rows, cur, self.s.tz or "UTC")
        return pn.Column(pn.pane.Markdown("\n\n".join(lines), css_classes=["wb-event-report"]),
                         data_table(table.round(2), css_classes=["wb-event-table"]),
                         sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            run_banner(self.s),
            pn.pane.Markdown(ABOUT, sizing_mode="stretch_width"),
            pn.Row(self.hours, self.notice, self.site, self.compute_button, self.download),
            pn.panel(self._heatmap, sizing_mode="stretch_width"),
            pn.Row(self.pick_site, self.pick_start, self.plan_button),
            pn.panel(self._offer, sizing_mode="stretch_width"),
            pn.pane.Markdown("**Grid events of the shown run** (the Supply chart shades "
                             "them):"),
            pn.panel(self._report, sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
