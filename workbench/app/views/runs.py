"""The Runs tab: stored runs of the scenario, loaded, renamed, deleted, compared."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import panel as pn
import param

from workbench import runs as stored_runs
from workbench.app import derive, plots
from workbench.app.markup import code, esc
from workbench.app.views.common import StateView, data_table, table_titles, zone_times

RUNS_SHOWN: tuple[tuple[str, str], ...] = (
    ("created", "stored ({tz})"), ("name", "name"), ("policy", "policy"),
    ("knobs", "knobs"), ("cost", "plan's part ({c})"), ("carbon_kg", "carbon (kg)"),
    ("deadline_misses", "misses"), ("jobs_unfinished", "not done"), ("run_id", "run"),
)
"""Columns of the Runs tab's table: ``cost`` is the part of the bill the plan controls (the
bill less what the same sites pay running no job, :mod:`workbench.bill`)."""


class RunsView(StateView):
    """Stored runs of the scenario: load, rename, delete, tick to compare side by side."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.show_baselines = pn.widgets.Checkbox(label="show comparison (baseline) runs",
                                                  value=False, css_classes=["wb-runs-baselines"])
        self.table = data_table(pd.DataFrame(), selectable="checkbox", pagination="local",
                           page_size=12, css_classes=["wb-runs"])
        self.load_button = pn.widgets.Button(label="Load", color="primary",
                                             css_classes=["wb-runs-load"], width=90)
        self.compare_button = pn.widgets.Button(label="Compare ticked", color="success",
                                                css_classes=["wb-runs-compare"], width=140)
        self.new_name = pn.widgets.TextInput(placeholder="new name", width=180,
                                             css_classes=["wb-runs-name"])
        self.rename_button = pn.widgets.Button(label="Rename", width=90,
                                               css_classes=["wb-runs-rename"])
        self.delete_button = pn.widgets.Button(label="Delete ticked", color="danger",
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
            created=zone_times(runs["created_utc"], tz).dt.strftime("%m-%d %H:%M"),
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
            self.hint.object = f"Loaded run {code(ids[0])}: the other tabs show it."

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
                                f"run(s) for good: {', '.join(code(i) for i in ids)}.")
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
            return pn.pane.Markdown(f"Cannot compare: {esc(exc)}")
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
            pn.Row(pn.pane.HoloViews(plots.cumulative(
                results, "cost", f"the plan's part of the bill ({currency})", tz),
                sizing_mode="stretch_width"),
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
