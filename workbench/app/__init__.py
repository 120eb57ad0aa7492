"""The Panel web app: a param-based state object and thin views over it.

``create_app(db_path)`` builds one app per session; ``apps/workbench.py`` serves it and
``workbench serve`` starts that server. Notebooks use the same state, views and plots.
"""

from workbench.app.running import RunOutcome
from workbench.app.shared import SharedCache
from workbench.app.state import WorkbenchState
from workbench.app.views import (
    ExportView,
    GridView,
    MetricsView,
    MigrationsView,
    PlanView,
    ProgressPanel,
    QuoteView,
    RunsView,
    Sidebar,
    WorkbenchApp,
    create_app,
)

__all__ = [
    "ExportView",
    "GridView",
    "MetricsView",
    "MigrationsView",
    "PlanView",
    "ProgressPanel",
    "QuoteView",
    "RunsView",
    "RunOutcome",
    "SharedCache",
    "Sidebar",
    "WorkbenchApp",
    "WorkbenchState",
    "create_app",
]
