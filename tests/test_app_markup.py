"""Stored cross-site scripting: every user-supplied string reaches the page as text.

A scenario whose every name is markup (scenario, datacenters, regions, jobs, application,
GPU type, currency, description), a run renamed to markup, markup typed into a field and
quoted in messages: every view, the banner and the whole page are rendered server side and
each piece of HTML the browser would be given (HTML and Markdown panes, table headers,
tooltip templates) is parsed. No element, attribute or URL may come from the user's text,
and the text itself must still be shown.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Iterator
from datetime import timedelta
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import panel as pn
import pytest
from bokeh.models import Div, HoverTool, Model
from helpers_sim import SLOT_S, START, profile, training
from panel.models.markup import HTML as PanelHTML  # noqa: N811 - Panel's HTML model
from panel.models.tabulator import DataTabulator

from workbench import Store, cubes
from workbench.app import create_app, markup
from workbench.equal_work import like_for_like
from workbench.model import Datacenter, GpuPool, Link, Scenario

MARK = "wb-hostile"
"""Every hostile string carries this text, so a test can see it was shown."""


def hostile(n: int) -> str:
    """Markup that would run ``alert(n)`` if it reached the page unescaped."""
    return (f'{MARK}{n}<img src=x onerror=alert({n})><script>alert({n})</script>'
            f'<a href="javascript:alert({n})">x</a>*_`[{n}](javascript:alert({n}))$$')


NAMES = {key: hostile(n) for n, key in enumerate((
    "scenario", "dc_a", "dc_b", "region_a", "region_b", "job_1", "job_2", "app", "gpu",
    "currency", "description", "run", "typed", "message", "store_error"), start=1)}
# A run name is at most 64 characters (workbench.store.runs.RUN_NAME_CHARS): the markup
# that fits, with room for the second run's "-2".
NAMES["run"] = f"{MARK}12<img src=x onerror=alert(12)><script>alert(12)"


def hostile_scenario() -> Scenario:
    """Two datacenters, one pool each, two jobs: every name is :func:`hostile`."""
    n = NAMES
    n_slots = 8
    times = pd.date_range(START.replace(tzinfo=None), periods=n_slots, freq=f"{SLOT_S}s")
    cube = cubes.make_cube(times, [n["region_a"], n["region_b"]],
                           np.column_stack([np.full(n_slots, 1.0), np.full(n_slots, 0.5)]),
                           np.column_stack([np.full(n_slots, 600.0), np.full(n_slots, 300.0)]),
                           currency=n["currency"], slot_s=SLOT_S, source="test")
    app = n["app"]
    # job_1 has no deadline: under the impossible caps below lyapunov leaves it waiting
    # (a job with a deadline would be run by its completion rule) and a warning names it.
    jobs = tuple(
        training(job_id, home=home, arrival_slot=i, slots_of_work=1.5, deadline_slot=deadline)
        for i, (job_id, home, deadline) in enumerate(((n["job_1"], n["dc_a"], None),
                                                      (n["job_2"], n["dc_b"], 7))))
    jobs = tuple(dataclasses.replace(j, app=app) for j in jobs)
    prof = profile(app=app, gpu_type=n["gpu"])
    return Scenario(
        name=n["scenario"], description=n["description"], currency=n["currency"],
        datacenters=(Datacenter(n["dc_a"], n["region_a"], "X-A", "UTC", pue=1.5),
                     Datacenter(n["dc_b"], n["region_b"], "X-B", "Asia/Shanghai", pue=1.2)),
        pools=(GpuPool(n["dc_a"], n["gpu"], 4, idle_power_w=60.0, max_power_w=400.0),
               GpuPool(n["dc_b"], n["gpu"], 4, idle_power_w=60.0, max_power_w=400.0)),
        links=(Link(n["dc_a"], n["dc_b"], bandwidth_gbps=10.0, latency_ms=20.0,
                    transfer_energy_kwh_per_gb=0.01),),
        jobs=jobs, profiles=(prof,), grid=cube, start=START, slot_s=SLOT_S, n_slots=n_slots,
    )


class _Markup(HTMLParser):
    """The elements, attributes and text of a piece of HTML, as a browser would parse it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(k, v or "") for k, v in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def injected(fragment: str) -> list[str]:
    """What in ``fragment`` (HTML) came from a hostile string rather than from the app:
    an element the app never writes, an event handler, a ``javascript:`` URL."""
    doc = _Markup()
    doc.feed(fragment)
    doc.close()
    found = [f"<{t}>" for t in doc.tags if t in ("img", "script", "a", "iframe", "svg")]
    found += [f"{k}=" for k, v in doc.attrs if k.startswith("on") or (
        k in ("href", "src", "action", "formaction", "data")
        and "javascript:" in v.replace(" ", "").lower())]
    return found


def shown_text(fragment: str) -> str:
    doc = _Markup()
    doc.feed(fragment)
    doc.close()
    return "".join(doc.text)


def fragments(root: Model) -> Iterator[tuple[str, str]]:
    """Each piece of HTML in a rendered Bokeh tree: ``(where, html)``.

    Panel's HTML model carries its HTML escaped for the wire (the browser unescapes it into
    ``innerHTML``); table headers and the value templates of tooltips are HTML as they are.
    """
    for model in root.references():
        if isinstance(model, PanelHTML):
            yield f"{type(model).__name__} {model.css_classes}", html.unescape(model.text)
        elif isinstance(model, Div):  # (a Title or a Label is drawn as text on the canvas)
            yield "Div", str(model.text)
        if isinstance(model, DataTabulator):
            for column in model.columns:
                yield f"table header {column.field!r}", str(column.title)
        if isinstance(model, HoverTool) and isinstance(model.tooltips, list):
            for label, template in model.tooltips:
                yield f"tooltip {label!r}", str(template)


def test_esc_keeps_text_and_drops_markup() -> None:
    name = hostile(0)
    escaped = markup.esc(name)
    assert injected(escaped) == [] and shown_text(escaped) == name
    # Markdown reads none of it as markup either (no emphasis, code, link or math).
    md = pn.pane.Markdown(f"run {escaped}")._transform_object(f"run {escaped}")["object"]
    rendered = html.unescape(md)
    assert injected(rendered) == [] and name in shown_text(rendered)
    assert markup.esc("a_b & c") == "a&#95;b &amp; c" and shown_text(markup.esc("a_b")) == "a_b"


@pytest.fixture(scope="module")
def hostile_app(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """An app over the hostile scenario with two stored runs, the shown one renamed to
    markup, capped per datacenter (warnings naming them), compared, quoted, with markup
    typed into V and in the message and store-error boxes."""
    db = tmp_path_factory.mktemp("xss") / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(hostile_scenario())
    app = create_app(str(db), scenario_name=NAMES["scenario"], policy="lyapunov",
                     baseline_policies=["asap-home", "offline"], save_runs=True)
    s = app.state
    assert s.scenario is not None and s.scenario.name == NAMES["scenario"]
    assert s.run() is not None
    s.cap_mode = "per datacenter"
    for dc in (NAMES["dc_a"], NAMES["dc_b"]):
        assert s.enter(f"carbon_cap_kg:{dc}", "0.001") == ""
    assert s.run() is not None and s.message_kind == "warning"  # the caps are missed
    s.rename_run(str(s.run_info["run_id"]), NAMES["run"])
    assert s.run_info["name"] == NAMES["run"]
    mine = s.runs_table[s.runs_table["status"] != "baseline"]
    s.rename_run(str(mine["run_id"].iloc[1]), NAMES["run"] + "-2")
    s.compare_ids = list(mine["run_id"].iloc[:2])
    quote = app.views["Quote"]
    quote.home.value = NAMES["dc_b"]
    assert s.quote(quote.spec()) is not None
    quote.deadline.value_input = NAMES["typed"]  # refused, and quoted in the reason
    app.views["Runs"]._load(None)  # the hint quotes the run id (nothing ticked: asks)
    app.views["Runs"].table.selection = [0]
    app.views["Runs"]._delete(None)  # the first press lists the run ids it would delete
    s.enter("V", NAMES["typed"])  # refused, and quoted in the reason under the field
    s.store_error = f"store {NAMES['store_error']} is locked"
    s.say(f"bad input: {NAMES['message']}", "danger")
    return app


@pytest.mark.slow
def test_every_view_and_the_banner_show_hostile_names_as_text(hostile_app) -> None:  # noqa: ANN001
    app = hostile_app
    views = {"page": app.template(), "sidebar": app.sidebar, "progress": app.progress,
             **app.views}
    # The Metrics tab loads its sections after the page: render each one as well.
    metrics = app.views["Metrics"]
    views.update({f"Metrics{name}": getattr(metrics, name)() for name in metrics.SECTIONS})
    # The Runs tab's comparison and the Grid tab's forecast pane are drawn on request.
    views["Runs comparison"] = app.views["Runs"]._comparison()
    seen: set[str] = set()
    for where, view in views.items():
        root = pn.panel(view).get_root()
        for part, fragment in fragments(root):
            assert injected(fragment) == [], f"{where}: {part}: {fragment[:300]}"
            seen |= {k for k, v in NAMES.items() if v in shown_text(fragment)}
    # The names were shown (as text), not dropped: each one somewhere on the page.
    assert seen >= {"scenario", "dc_a", "dc_b", "run", "currency", "typed", "message",
                    "store_error", "job_1", "region_a", "gpu"}, set(NAMES) - seen


def test_the_banner_names_the_run_as_text(hostile_app) -> None:  # noqa: ANN001
    s = hostile_app.state
    banner = markup.banner_html(s.run_info, True, [NAMES["message"]], "UTC")
    assert injected(banner) == []
    text = shown_text(banner)
    assert NAMES["run"] in text and NAMES["message"] in text and NAMES["dc_a"] in text


def test_every_html_formatter_escapes_what_it_is_given() -> None:
    """Each formatter of :mod:`workbench.app.markup`, fed markup in every string argument."""
    x = hostile(99)
    table = pd.DataFrame({"policy": [x, "asap-home"], "cost": [1.0, 2.0],
                          "carbon_kg": [1.0, 1.0], "mean_jct_h": [1.0, 2.0]})
    parts = {"efficiency": 1.0, "temporal": 1.0, "spatial": 0.0, "movement": -0.5}
    now = 100.0
    out = {
        "headline": markup.headline_html({"cost": 1.0}, x),
        "banner": markup.banner_html({"name": x, "run_id": x, "policy": x,
                                      "created_utc": START + timedelta(hours=1),
                                      "knobs": {"carbon_cap_kg": {x: 1.0}}}, True, [x], "UTC"),
        "progress": markup.progress_html([{"policy": x, "done": 1, "total": 2,
                                           "started_s": now - 5, "finished_s": None}], now),
        "stage": markup.stage_html(x),
        "caps": markup.caps_html([{"scope": x, "cap_kg": 1.0, "carbon_kg": 2.0, "met": False}],
                                 {"power_cap_violations": 1, "power_cap_kw": x}),
        "caps met": markup.caps_html([{"scope": x, "cap_kg": 2.0, "carbon_kg": 1.0,
                                       "met": True}]),
        "savings": markup.savings_html(like_for_like(
            {"cost": 1.0, "equal_work_cost": 2.0, "unfinished_charge": 1.0,
             "jobs_unfinished": 1}, {"cost": 3.0, "equal_work_cost": 3.0,
                                     "unfinished_charge": 0.0, "jobs_unfinished": 0}), x, x,
            {"bound": x}),
        "bars": markup.compare_bars_row(table, x),
        "waterfall": markup.attribution_row({"cost": parts, "carbon_kg": parts}, x),
        "note": markup.attribution_note_html({"kind": x, "cost": 1.0, "carbon_kg": 1.0}, x),
        "note on equal work": markup.attribution_note_html(
            {"kind": x, "cost": 1.0, "carbon_kg": 1.0, "equal_work_cost": 2.0,
             "equal_work_carbon_kg": 1.0}, x),
        "title": markup.title_html(x),
        "code": markup.code(x),
    }
    for name, fragment in out.items():
        assert injected(fragment) == [], f"{name}: {fragment[:300]}"
        assert x in shown_text(fragment), name

