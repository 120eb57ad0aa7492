"""The Export tab: the shown run's plan, migrations, site meter and comparison as CSV."""

from __future__ import annotations

import io
from typing import Any

import panel as pn
import param

from workbench.app import derive
from workbench.app.markup import esc
from workbench.app.views.common import StateView, no_run, run_banner
from workbench.bill import has_meter
from workbench.io.plan_csv import (
    write_csv,
    write_migrations_csv,
    write_plan_csv,
    write_sites_csv,
)


class ExportView(StateView):
    """Download the plan and migrations CSV of the shown run (the CLI's schema)."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.plan_download = pn.widgets.FileDownload(
            callback=self._plan_csv, filename="plan.csv", label="Download plan CSV",
            color="primary", disabled=True, css_classes=["wb-download-plan"])
        self.migrations_download = pn.widgets.FileDownload(
            callback=self._migrations_csv, filename="migrations.csv",
            label="Download migrations CSV", disabled=True,
            css_classes=["wb-download-migrations"])
        self.sites_download = pn.widgets.FileDownload(
            callback=self._sites_csv, filename="sites.csv",
            label="Download sites CSV (the site meter)", disabled=True,
            css_classes=["wb-download-sites"])
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
        self.sites_download.param.update(disabled=not self._metered(),
                                         filename=f"{stem}_sites.csv")
        self.compare_download.param.update(disabled=not has,
                                           filename=f"{stem}_comparison.csv")

    def _names(self) -> list[str]:
        sc = self.s.scenario
        return [] if sc is None else [d.name for d in sc.datacenters]

    def _metered(self) -> bool:
        res = self.s.result
        return res is not None and has_meter(res.slots, self._names())

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

    def _sites_csv(self) -> io.StringIO:
        buf = io.StringIO()
        if self._metered():
            assert self.s.result is not None
            write_sites_csv(self.s.result.slots, self._names(), buf)
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
            return no_run()
        return pn.pane.Markdown(
            f"Run of **{esc(res.policy)}** on **{esc(res.meta['scenario'])}**: "
            f"{len(res.plan):,d} plan "
            f"rows, {len(res.migrations):,d} migrations. Plan and migrations CSV have the CLI's "
            "columns (README: Plan and migrations CSV; `workbench runs export RUN` writes the "
            "same); the sites CSV is the site meter, one row per datacenter and slot (`plan "
            "--sites-out`); the comparison CSV holds the Metrics tab's table (savings in % "
            "against asap-home).")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(run_banner(self.s), pn.panel(self._summary), self.plan_download,
                         self.migrations_download, self.sites_download,
                         self.compare_download,
                         sizing_mode="stretch_width")
