"""Thin Panel views over :class:`~workbench.app.state.WorkbenchState`: one ``Viewer`` per tab.

Views hold widgets and layout only; every number they show comes from the state object or
from :mod:`workbench.app.derive`, every HTML fragment from :mod:`workbench.app.markup`. One
module per tab (:mod:`.metrics`, :mod:`.plan`, :mod:`.migrations`, :mod:`.runs`,
:mod:`.grid`, :mod:`.supply`, :mod:`.flexibility`, :mod:`.quote`,
:mod:`.export`), the sidebar and progress panel
(:mod:`.sidebar`), what they share (:mod:`.common`); :class:`WorkbenchApp` puts them
together and :func:`create_app` builds one per browser session (:mod:`.page`).
"""

from workbench.app.views.export import ExportView
from workbench.app.views.flexibility import FlexibilityView
from workbench.app.views.grid import ForecastPane, GridView
from workbench.app.views.metrics import MetricsView
from workbench.app.views.migrations import MigrationsView
from workbench.app.views.page import WorkbenchApp, create_app
from workbench.app.views.plan import PlanView
from workbench.app.views.quote import QuoteView
from workbench.app.views.runs import RunsView
from workbench.app.views.sidebar import ProgressPanel, Sidebar

__all__ = [
    "ExportView",
    "FlexibilityView",
    "ForecastPane",
    "GridView",
    "MetricsView",
    "MigrationsView",
    "PlanView",
    "ProgressPanel",
    "QuoteView",
    "RunsView",
    "Sidebar",
    "WorkbenchApp",
    "create_app",
]
