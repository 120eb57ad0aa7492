"""The floor of a first page, served beside the app by ``bench/app_pages.py``: the app's
page layout (``WorkbenchApp.template``: a title bar, a sidebar and a main area; Tabulator
loaded) with two widgets and one HTML pane holding ``#metric-cost``. What any Panel page of
this kind costs to serve and draw; the app's first page is reported as a ratio against it."""

import panel as pn

pn.extension("tabulator")

pn.Column(
    pn.pane.HTML('<div style="font-size:22px;padding:10px 18px">floor</div>',
                 styles={"background": "#1f6f8b", "color": "white"},
                 sizing_mode="stretch_width", margin=0, height=50),
    pn.Row(pn.Column(pn.widgets.Select(name="Scenario", options=["seed3"]),
                     pn.widgets.Button(name="Run", button_type="primary"), width=320,
                     scroll=True, sizing_mode="stretch_height"),
           pn.Column(pn.pane.HTML('<span id="metric-cost">0.00</span>'), scroll=True,
                     sizing_mode="stretch_both"), sizing_mode="stretch_both"),
    sizing_mode="stretch_both",
).servable(title="floor")
