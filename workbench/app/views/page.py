"""The whole page: the sidebar, the progress panel and the tabs over one state."""

from __future__ import annotations

from typing import Any

import panel as pn
import param
from panel.viewable import Viewer
from tornado.ioloop import IOLoop

from workbench.app.markup import title_html
from workbench.app.running import quiet_closed_sockets
from workbench.app.state import WorkbenchState
from workbench.app.views.common import StateView
from workbench.app.views.export import ExportView
from workbench.app.views.flexibility import FlexibilityView
from workbench.app.views.grid import GridView
from workbench.app.views.metrics import MetricsView
from workbench.app.views.migrations import MigrationsView
from workbench.app.views.plan import PlanView
from workbench.app.views.quote import QuoteView
from workbench.app.views.runs import RunsView
from workbench.app.views.sidebar import ProgressPanel, Sidebar
from workbench.app.views.supply import SupplyView

PROGRESS_MS = 400
"""How often a served session publishes a run's progress (ms): from its event loop."""


class WorkbenchApp(StateView):
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
            "Grid": GridView(state=s), "Supply": SupplyView(state=s),
            "Flexibility": FlexibilityView(state=s), "Quote": QuoteView(state=s),
            "Export": ExportView(state=s),
        }
        # A tab's content is built when it is first shown (a placeholder until then), so
        # the first page costs the Metrics tab only.
        self._slots = {name: pn.Column(sizing_mode="stretch_width") for name in self.views}
        self.tabs = pn.Tabs(*self._slots.items(), dynamic=True, sizing_mode="stretch_width")
        self.tabs.param.watch(self._show, "active")
        self._show()
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            # Progress leaves from the session's loop; a tab closed mid-run: the run goes on
            # (and is stored), nothing more is sent to it.
            s.publisher.defer()
            quiet_closed_sockets(IOLoop.current().asyncio_loop)  # type: ignore[attr-defined]
            pn.state.add_periodic_callback(s.publisher.flush, period=PROGRESS_MS)
            pn.state.on_session_destroyed(lambda _ctx: s.close_session())

    def _show(self, *_: Any) -> None:
        name = list(self.views)[self.tabs.active]
        slot = self._slots[name]
        if slot.objects:
            return
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None or self.tabs.active == 0:
            slot.objects = [self.views[name].__panel__()]
            return
        # Served, a tab shown for the first time: a spinner at once, the tab's content on
        # the next tick (the Grid tab was blank for 4 s while its charts were built).
        slot.objects = [pn.Row(pn.indicators.LoadingSpinner(value=True, size=28),
                               pn.pane.Markdown(f"Building the {name} tab…"),
                               css_classes=["wb-tab-loading"])]

        def build() -> None:
            slot.objects = [self.views[name].__panel__()]

        doc.add_next_tick_callback(build)

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

        Plain Panel layouts rather than a Panel template: a FastListTemplate's scripts and
        styles slow every first page (``bench/app_pages.py`` serves such a floor page
        beside the app; docs/app.md).
        """
        header = pn.pane.HTML(title_html(self.title),
                              styles={"background": "#1f6f8b", "color": "white"},
                              sizing_mode="stretch_width", margin=0, height=50)
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
    """A fresh app (its own state) for one session; ``state_params`` go to
    :class:`WorkbenchState` (``shared=`` a cache other than the server's)."""
    return WorkbenchApp(state=WorkbenchState(db_path=db_path, **state_params))
