"""The app in a real browser: Debian's chromium driven by Playwright, ``panel serve`` on loopback.

Skipped with a reason when Playwright or ``/usr/bin/chromium`` is missing (``.ci/run``
installs chromium). Never downloads a browser. Screenshots land in ``test-artifacts/``.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench import Store, build_seed3, first_hours
from workbench.io.plan_csv import PLAN_COLUMNS
from workbench.model import Scenario
from workbench.policies import make_policy
from workbench.sim import simulate

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 120_000  # a loaded 2-core machine: the first run of every comparison takes a while

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)


def mini_scenario() -> Scenario:
    """seed3 cut to one day and the jobs arriving in its first six hours."""
    return first_hours(build_seed3(), 24, arrivals_h=6, name="mini")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``panel serve apps/workbench.py`` on a free loopback port, over a store with ``mini``."""
    db = tmp_path_factory.mktemp("browser") / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(mini_scenario())
    port = _free_port()
    panel = shutil.which("panel", path=str(Path(sys.executable).parent)) or "panel"
    log = (tmp_path_factory.getbasetemp() / "panel-serve.log").open("w")
    proc = subprocess.Popen(
        [panel, "serve", str(ROOT / "apps" / "workbench.py"), "--port", str(port),
         "--address", "127.0.0.1", "--allow-websocket-origin", f"127.0.0.1:{port}",
         "--num-procs", "1", "--args", "--db", str(db)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "BOKEH_RESOURCES": "server"},
    )
    url = f"http://127.0.0.1:{port}/workbench"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"panel serve did not come up; see {log.name}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def page(server: str) -> Iterator[object]:
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1500, "height": 1000},
                                      accept_downloads=True)
        # Loopback only: anything else (web fonts) is refused without leaving the machine.
        context.route("**/*", lambda route: route.continue_()
                      if route.request.url.startswith("http://127.0.0.1") else route.abort())
        pg = context.new_page()
        ARTIFACTS.mkdir(exist_ok=True)
        console = (ARTIFACTS / "browser-console.log").open("w")
        pg.on("console", lambda msg: console.write(f"{msg.type}: {msg.text}\n"))
        pg.on("pageerror", lambda err: console.write(f"pageerror: {err}\n"))
        pg.set_default_timeout(TIMEOUT_MS)
        pg.goto(server)
        yield pg
        browser.close()
        console.close()


def _wait_text(locator: object, differs_from: str | None = None,
               timeout_s: float = TIMEOUT_MS / 1000) -> str:
    """Poll a locator's text until it is shown (and differs from ``differs_from``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if locator.count() > 0:  # type: ignore[attr-defined]
                text = locator.first.inner_text(timeout=1000)  # type: ignore[attr-defined]
                if text.strip() and text != differs_from:
                    return text
        except sync_api.Error:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"text did not appear or change (was {differs_from!r})")
        time.sleep(0.25)


def _tab(pg: object, name: str) -> None:
    pg.locator(".bk-tab", has_text=name).first.click()  # type: ignore[attr-defined]


def _run_and_read(pg: object, before: str | None) -> dict[str, str]:
    pg.locator(".wb-run button").click()  # type: ignore[attr-defined]
    cost = _wait_text(pg.locator("#metric-cost"), differs_from=before)  # type: ignore[attr-defined]
    out = {"cost": cost}
    for key in ("carbon_kg", "energy_kwh", "migrations"):
        out[key] = pg.locator(f"#metric-{key}").first.inner_text()  # type: ignore[attr-defined]
    return out


def test_change_v_run_and_download(page: object, tmp_path: Path) -> None:
    pg = page
    ARTIFACTS.mkdir(exist_ok=True)
    _tab(pg, "Metrics")  # type: ignore[attr-defined]
    pg.locator("#metrics-empty").wait_for()  # type: ignore[attr-defined]

    first = _run_and_read(pg, None)

    v_box = pg.get_by_label("V", exact=True)  # type: ignore[attr-defined]
    v_box.fill("1")
    v_box.press("Enter")
    second = _run_and_read(pg, first["cost"])
    assert second["cost"] != first["cost"]
    # Where the saving comes from: the attribution waterfall beside the comparison.
    chart = pg.locator(".wb-attribution-chart").first  # type: ignore[attr-defined]
    chart.wait_for()
    chart.locator(".bk-Canvas, canvas").first.wait_for()
    assert "efficiency" in _wait_text(pg.locator("#attribution-note"))  # type: ignore[attr-defined]
    pg.screenshot(path=str(ARTIFACTS / "browser_metrics.png"), full_page=True)  # type: ignore[attr-defined]

    # The downloaded plan CSV has the CLI's header and one row per job and active slot.
    _tab(pg, "Export")  # type: ignore[attr-defined]
    button = pg.locator(".wb-download-plan").first  # type: ignore[attr-defined]
    with pg.expect_download() as info:  # type: ignore[attr-defined]
        button.click()
    dest = tmp_path / "plan.csv"
    info.value.save_as(dest)
    rows = list(csv.reader(io.StringIO(dest.read_text())))
    assert tuple(rows[0]) == PLAN_COLUMNS
    # The app's migration threshold starts at the policy's own default.
    expected = simulate(mini_scenario(), make_policy("lyapunov", V=1.0))
    assert len(rows) - 1 == len(expected.plan)

    _tab(pg, "Plan")  # type: ignore[attr-defined]
    pg.locator(".bk-Canvas, canvas").first.wait_for()  # type: ignore[attr-defined]
    pg.screenshot(path=str(ARTIFACTS / "browser_plan.png"), full_page=True)  # type: ignore[attr-defined]


def test_a_missed_carbon_cap_shows_as_a_warning(page: object) -> None:
    pg = page
    _tab(pg, "Metrics")  # type: ignore[attr-defined]
    before = pg.locator("#metric-cost").first.inner_text()  # type: ignore[attr-defined]
    pg.get_by_label("Carbon cap", exact=True).select_option("global")  # type: ignore[attr-defined]
    cap = pg.get_by_label("Global carbon cap (kg over the horizon)")  # type: ignore[attr-defined]
    cap.fill("1")
    cap.press("Enter")
    _run_and_read(pg, before)
    warning = _wait_text(pg.locator("#metrics-cap-warning"))  # type: ignore[attr-defined]
    assert "Carbon cap missed" in warning and "1.0 kg" in warning
    pg.screenshot(path=str(ARTIFACTS / "browser_cap_warning.png"), full_page=True)  # type: ignore[attr-defined]
