"""What every view shares: the typed state view, tables, typed fields, the run banner."""

from __future__ import annotations

from typing import Any

import pandas as pd
import panel as pn
import param
from panel.viewable import Viewer

from workbench.app import derive
from workbench.app.markup import banner_html, esc
from workbench.app.state import WorkbenchState

NO_RUN = ("**No run yet.** Pick a scenario, a policy and its knobs in the sidebar and press "
          "**Run**, or load a stored run in the **Runs** tab. A week of `seed3` takes "
          "10-40 s per policy (the hindsight plan longest); progress and time left show "
          "above the tabs, and comparison runs are kept for every session of the server.")
"""What a tab that needs a run shows before the first one."""


def no_run() -> pn.pane.Markdown:
    return pn.pane.Markdown(NO_RUN, css_classes=["wb-empty"], sizing_mode="stretch_width")


class StateView(Viewer):
    """A view over one :class:`WorkbenchState` (``s`` is it, typed)."""

    state = param.ClassSelector(class_=WorkbenchState)

    @property
    def s(self) -> WorkbenchState:
        state = self.state
        if not isinstance(state, WorkbenchState):
            raise TypeError("a view needs state=WorkbenchState(...)")
        return state


ERROR_STYLE = {"color": "#b00020", "font-size": "12px"}


def error_pane(state: WorkbenchState, knob: str) -> pn.pane.Markdown:
    """The reason a typed knob is refused, right under its field (hidden while valid)."""
    def reason(errors: dict[str, str]) -> str:
        return esc(errors.get(knob, ""))  # it quotes what was typed

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
    return pn.widgets.TextInput(label=name, value=value, value_input=value, **params)


TABLE_CSS = (".tabulator-col-title {white-space: normal !important; "
             "text-overflow: clip !important; overflow-wrap: anywhere}"
             ".tabulator-cell {white-space: normal !important; "
             "text-overflow: clip !important; overflow-wrap: anywhere}")
"""Table headers and cells wrap onto more lines instead of being cut to ``cost ...``
(a word wider than its column breaks inside rather than lose its end: ``powe``)."""


def table_titles(frame: pd.DataFrame) -> dict[str, str]:
    """Header titles of every column: its name escaped (a table's headers are HTML, and a
    column may be named after a run or a datacenter), allowed to break after a "/"
    (``stored (Asia/Shanghai)`` wraps instead of being cut)."""
    return {str(c): esc(c).replace("/", "/\u200b") for c in frame.columns}


def data_table(frame: pd.DataFrame, **params: Any) -> pn.widgets.Tabulator:
    """A read-only table that fits the width (no side-scrolling) with wrapped headers."""
    opts: dict[str, Any] = {"disabled": True, "show_index": False, "layout": "fit_columns",
                            "sizing_mode": "stretch_width", "stylesheets": [TABLE_CSS],
                            "configuration": {"columnDefaults": {"headerWordWrap": True}},
                            "titles": table_titles(frame)}
    opts.update(params)
    return pn.widgets.Tabulator(frame, **opts)


def zone_times(times: pd.Series, tz: str) -> pd.Series:
    """UTC timestamps as wall-clock times in ``tz`` (naive: bokeh draws them as they are)."""
    t = pd.to_datetime(times, utc=True)
    return t.dt.tz_convert(tz).dt.tz_localize(None)


def run_banner(state: WorkbenchState) -> pn.pane.HTML:
    """:func:`banner_html` kept up to date with the state."""
    def html(info: dict[str, Any], running: bool, result: Any, tz: str) -> str:
        warnings = derive.run_warnings(result, tz) if result is not None else []
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
    window.param.update(start=start, end=end, value=(start, end), label=f"{label} ({tz})")
