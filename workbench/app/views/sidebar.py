"""The sidebar (scenario, time zone, policy, knobs, Run, messages) and the progress panel."""

from __future__ import annotations

from typing import Any

import panel as pn
import param

from workbench.app.knobs import V_STEPS, check_knob
from workbench.app.markup import esc, progress_html, stage_html
from workbench.app.views.common import ERROR_STYLE, StateView, error_pane, typed_input
from workbench.policies import policy_knobs, unsuitable


class Sidebar(StateView):
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
            return f"*{esc(policy)}* takes no V or migration threshold."

        def takes_neither(policy: str) -> bool:
            return not ({"V", "migration_threshold"} & set(policy_knobs(policy)))

        self.v_slider = pn.widgets.DiscreteSlider(
            label="V (log scale)", options=sorted(set(V_STEPS) | {float(s.V)}),
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
        self.run_button = pn.widgets.Button(label="Run", color="primary",
                                            css_classes=["wb-run"])
        self.run_button.on_click(self._on_run)
        self.reload_button = pn.widgets.Button(
            label="Reload store", color="light", visible=s.param.store_error.rx.bool(),
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
        text = ("Run is disabled until the fields marked in red are fixed."
                if set(errors) - {"policy"} else "")
        if "policy" in errors:  # the policy would only repeat another on this scenario
            text = f"{text} Run is disabled: {esc(errors['policy'])}.".strip()
        self.error_text.param.update(object=text, visible=bool(errors))

    async def _on_run(self, _event: Any) -> None:
        await self.s.run_async()

    def _caps_widgets(self, *_: Any) -> None:
        s = self.s
        widgets: list[Any] = []
        if s.cap_mode == "global":
            shown = (f"{s.carbon_cap_pct:g}%" if s.carbon_cap_pct is not None
                     else f"{s.carbon_cap_kg:g}")
            # A short label (the sidebar cut the long one): what the number means below.
            w = typed_input("Carbon cap, all sites (kg or %)", shown, css_classes=["wb-cap"])
            w.param.watch(lambda e: s.enter("carbon_cap_kg", e.new), "value_input")
            hint = pn.pane.Markdown("kg CO2 over the horizon, or a cut below asap-home's "
                                    "carbon written with %, e.g. 20%",
                                    styles={"color": "#555", "font-size": "12px"},
                                    margin=(-8, 10, 0, 10), css_classes=["wb-cap-hint"])
            widgets += [w, hint, error_pane(s, "carbon_cap_kg")]
        elif s.cap_mode == "per datacenter" and s.scenario is not None:
            for dc in s.scenario.datacenters:
                knob = f"carbon_cap_kg:{dc.name}"
                w = typed_input(f"Carbon cap {dc.name} (kg CO2)",
                                f"{float(s.carbon_caps_kg.get(dc.name, 0.0)):g}")
                w.param.watch(lambda e, knob=knob: s.enter(knob, e.new), "value_input")
                widgets += [w, error_pane(s, knob)]
        self.caps.objects = widgets

    def __panel__(self) -> pn.viewable.Viewable:
        s = self.s
        return pn.Column(
            pn.widgets.Select.from_param(s.param.scenario_name),
            pn.widgets.Select.from_param(s.param.tz, css_classes=["wb-tz"]),
            pn.widgets.Select.from_param(s.param.policy),
            self.v_slider, self.v_input, error_pane(s, "V"), self.knobs_note,
            pn.widgets.Select.from_param(s.param.cap_mode), self.caps,
            pn.widgets.MultiChoice.from_param(s.param.gpu_counts),
            self.threshold,
            pn.widgets.StaticText(value="Slot length (min)", margin=(5, 10, 0, 10)),
            pn.widgets.RadioButtonGroup.from_param(s.param.slot_minutes, label="Slot (min)"),
            pn.widgets.Select.from_param(s.param.forecast_mode),
            self.forecast_error, error_pane(s, "forecast_error"),
            pn.widgets.Select.from_param(s.param.forecast_model),
            pn.widgets.Checkbox.from_param(s.param.power_limits),
            pn.widgets.MultiChoice.from_param(s.param.baseline_policies),
            pn.pane.Markdown(pn.bind(_not_compared, s.param.baseline_policies,
                                     s.param.scenario),
                             styles={"color": "#555", "font-size": "12px"}, margin=(0, 10),
                             css_classes=["wb-not-compared"]),
            pn.widgets.Checkbox.from_param(s.param.save_runs),
            self.run_button, self.error_text,
            pn.pane.Alert(pn.bind(esc, s.param.message), alert_type=s.param.message_kind,
                          visible=s.param.message.rx.bool(), css_classes=["wb-message"]),
            pn.pane.Alert(pn.bind(esc, s.param.store_error), alert_type="danger",
                          visible=s.param.store_error.rx.bool(), css_classes=["wb-store-error"]),
            self.reload_button,
            sizing_mode="stretch_width",
        )


class ProgressPanel(StateView):
    """Progress of the running computation in the main area, with a Cancel button."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.cancel_button = pn.widgets.Button(label="Cancel", color="warning",
                                               css_classes=["wb-cancel"], width=100)
        self.cancel_button.on_click(lambda _e: self.s.cancel())

    @param.depends("state.progress_rows", "state.stage")
    def _html(self) -> pn.viewable.Viewable:
        import time

        return pn.pane.HTML(progress_html(self.s.progress_rows, time.monotonic())
                            + stage_html(self.s.stage), sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Row(pn.panel(self._html, sizing_mode="stretch_width"), self.cancel_button,
                      visible=self.s.param.running, sizing_mode="stretch_width",
                      styles={"background": "#f7fbfc", "border": "1px solid #cfe3ea",
                              "border-radius": "6px"}, css_classes=["wb-progress-panel"])


def _not_compared(policies: list[str], scenario: Any) -> str:
    """The comparison policies that do not run on ``scenario`` (each would only repeat
    another, :func:`workbench.policies.unsuitable`), and why; ``""`` when none."""
    if scenario is None:
        return ""
    skipped = [p for p in policies if unsuitable(p, scenario) is not None]
    return "".join(f"*{esc(p)}* is not run here: {esc(str(unsuitable(p, scenario)))}. "
                   for p in skipped)
