"""The app as an operator meets it: first-page time, one Run, and screenshots of every tab.

Serves ``apps/workbench.py`` over a copy of a store (default: ``workbench.duckdb`` as
``make run`` leaves it, with seed3 and a stored Lyapunov run), opens it in Debian's chromium
(Playwright) and measures:

- first page, first visitor: from the start of the navigation until the stored run's
  headline cost is drawn, as the page itself records it (:data:`SEEN_JS`; the server runs
  with ``--warm`` as ``workbench serve`` warms itself; ``--cold-server`` leaves the scenario
  load to this visitor);
- first page, second visitor: the same for a second session;
- one Run of Lyapunov at its default V with the app's default comparison policies (press Run,
  wait until the headline changes and the progress panel is gone); the ratio is against
  the warm first page of the same process.

With ``--screenshots DIR`` it saves every tab after the run at 1366x768 and 1920x1080
(``app_<tab>_<width>.png``; Plan and Migrations also scrolled down,
``app_<tab>_lower_<width>.png``). Usage::

    PYTHONPATH=$PWD python bench/app_pages.py --db workbench.duckdb --screenshots docs

(``--screenshots-only`` skips the later visitors' timings.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

from workbench.policies.lyapunov import DEFAULT_V

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update"]
TABS = ("Metrics", "Plan", "Migrations", "Runs", "Grid", "Supply", "Quote", "Export")
SIZES = ((1366, 768), (1920, 1080))
MARKERS = {"Metrics": ".wb-compare .tabulator-row", "Plan": ".wb-gantt-note p",
           "Migrations": ".wb-migrations .tabulator-row", "Runs": ".wb-runs .tabulator-row",
           "Grid": ".bk-Canvas, canvas", "Quote": ".wb-quote-button button",
           "Supply": ".wb-supply-site", "Export": ".wb-download-plan"}
"""What shows that a tab has drawn (screenshots wait for it)."""
BELOW = {"Metrics": ".wb-attribution", "Plan": ".wb-gantt", "Migrations": ".wb-migrations",
         "Runs": ".wb-runs-compared", "Grid": ".wb-heatmaps"}
"""Tabs with a second screenshot scrolled to this element (``app_<tab>_lower_<w>.png``)."""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(db: Path, warm: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    """``panel serve`` on a free port; ``warm``: with ``--warm`` (the script runs once at
    start, as ``workbench serve`` does, filling the caches the sessions share)."""
    port = _port()
    panel = shutil.which("panel", path=str(Path(sys.executable).parent)) or "panel"
    proc = subprocess.Popen(
        [panel, "serve", str(ROOT / "apps" / "workbench.py"), str(ROOT / "bench" / "app_floor.py"),
         "--port", str(port),
         "--address", "127.0.0.1", "--allow-websocket-origin", f"127.0.0.1:{port}",
         "--num-procs", "1", *(["--warm"] if warm else []), "--args", "--db", str(db)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "BOKEH_RESOURCES": "server"})
    url = f"http://127.0.0.1:{port}/workbench"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            # Only the server's own page: a HEAD-like probe of the static index.
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/static/extensions/panel/"
                                        "panel.min.js", timeout=5):
                break
        except OSError:
            time.sleep(0.3)
    return proc, url


SEEN_JS = """(() => { const find = (root) => { const e = root.querySelector('#metric-cost');
  if (e) return e; for (const x of root.querySelectorAll('*'))
    if (x.shadowRoot) { const y = find(x.shadowRoot); if (y) return y; } return null; };
  const check = () => { const e = find(document); const box = e && e.getBoundingClientRect();
    if (box && box.width > 0 && box.height > 0) { window.__wbSeenMs = performance.now(); }
    else { setTimeout(check, 20); } }; check(); })();"""
"""Records, in the page, when ``#metric-cost`` is first drawn with a size (ms from the start
of the navigation): the time the operator sees the headline."""


def first_page(browser, url: str, size: tuple[int, int],  # noqa: ANN001
               ctx: object | None = None) -> tuple[float, object]:
    """Seconds from the start of the navigation until ``#metric-cost`` is drawn, and the page.

    A fresh browser context (nothing cached) unless ``ctx`` is given (a returning visitor:
    its HTTP cache holds Bokeh's and Panel's scripts). The time is taken in the page (a 20 ms
    check from the first script on, :data:`SEEN_JS`), not by Playwright's ``wait_for``: that
    one polls with a back-off (up to 1 s between checks) and, while the deferred sections
    draw, reported the headline up to 2 s after the page had shown it.
    """
    if ctx is None:
        ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
        ctx.route("**/*", lambda r: r.continue_()  # type: ignore[attr-defined]
                  if r.request.url.startswith("http://127.0.0.1") else r.abort())
        ctx.add_init_script(SEEN_JS)  # type: ignore[attr-defined]
    page = ctx.new_page()  # type: ignore[attr-defined]
    page.set_default_timeout(180_000)
    page.goto(url)
    page.wait_for_function("window.__wbSeenMs !== undefined")
    return float(page.evaluate("window.__wbSeenMs")) / 1000.0, page


def alternate(browser, url: str, floor_url: str, repeat: int,  # noqa: ANN001
              ctx: object | None = None) -> tuple[list[float], list[float]]:
    """First-page seconds of the app and of the floor page, visited in turn ``repeat``
    times (so both see the same machine load): each in a fresh context, or as pages of
    ``ctx`` (a returning visitor)."""
    apps: list[float] = []
    floors: list[float] = []
    for _ in range(repeat):
        for target, out in ((floor_url, floors), (url, apps)):
            t, page = first_page(browser, target, SIZES[0], ctx)
            if ctx is None:
                page.context.close()  # type: ignore[attr-defined]
            else:
                page.close()  # type: ignore[attr-defined]
            out.append(t)
    return apps, floors


def visitors_line(what: str, apps: list[float], floors: list[float]) -> str:
    """Medians of :func:`alternate`'s visits, their ratio, each app visit, the load."""
    app_s, floor_s = sorted(apps)[len(apps) // 2], sorted(floors)[len(floors) // 2]
    return (f"{what} (median of {len(apps)}): app {app_s:.2f} s, floor page {floor_s:.2f} s "
            f"(app/floor {app_s / floor_s:.2f}); app runs "
            + ", ".join(f"{t:.2f}" for t in apps) + " s; load average "
            + open("/proc/loadavg").read().split()[0])


def session_build_s(db: Path) -> tuple[float, float]:
    """Server-side cost of a session in this process: state, views and Bokeh models of the
    page (sidebar and the Metrics tab), for the first session and a second one."""
    import panel as pn

    from workbench.app import create_app

    pn.extension("tabulator")
    out = []
    for _ in range(2):
        t0 = time.perf_counter()
        app = create_app(str(db))
        app.template()
        app.tabs.get_root()
        app.sidebar.__panel__().get_root()
        out.append(time.perf_counter() - t0)
    return out[0], out[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=ROOT / "workbench.duckdb")
    ap.add_argument("--screenshots", type=Path, default=None)
    ap.add_argument("--no-run", action="store_true", help="only time the first page")
    ap.add_argument("--repeat", type=int, default=3,
                    help="later visitors timed against the floor page (median)")
    ap.add_argument("--keep-db", type=Path, default=None,
                    help="copy the store to this file at the end (the Run's runs in it)")
    ap.add_argument("--cold-server", action="store_true",
                    help="serve without --warm: the first visitor pays the scenario load")
    ap.add_argument("--screenshots-only", action="store_true",
                    help="with --screenshots: skip the later, overlapping and returning "
                    "visitors' timings (the Run and the screenshots only)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    db = tmp / "bench.duckdb"
    shutil.copy(args.db, db)
    print(f"load average before: {open('/proc/loadavg').read().split()[0]}")
    first_s, second_s = session_build_s(db)
    print(f"server-side session build (state, views, models; no browser): first "
          f"{first_s:.2f} s, second {second_s:.2f} s (second/first {second_s / first_s:.2f})")
    proc, url = serve(db, warm=not args.cold_server)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            floor_url = url.rsplit("/", 1)[0] + "/app_floor"
            # A freshly started chromium compiles Bokeh's and Panel's scripts for the first
            # time on its first page (about 2 s here): the floor page takes that cost, so the
            # first visitor's figure is the server's, not the browser's start.
            t, extra = first_page(browser, floor_url, SIZES[0])
            extra.context.close()  # type: ignore[attr-defined]
            print(f"browser warm-up (floor page in a freshly started chromium): {t:.2f} s")
            cold, _ = first_page(browser, url, SIZES[0])
            warm, page = first_page(browser, url, SIZES[0])
            server = "cold server" if args.cold_server else "warm server (--warm)"
            print(f"first page on a {server} (headline of the stored run shown): first "
                  f"visitor {cold:.2f} s, second visitor {warm:.2f} s (second/first "
                  f"{warm / cold:.2f})")
            repeat = 0 if args.screenshots_only else args.repeat
            # Later visitors, interleaved with the floor page (bench/app_floor.py: the same
            # template with one pane) so both see the same machine load.
            if repeat:
                print(visitors_line("later visitors, empty browser cache", *alternate(
                    browser, url, floor_url, repeat)))
            # Overlapping visitors: B opens the page as soon as A's headline is drawn, while
            # A's deferred Metrics sections are still being built on the server's thread.
            pairs = []
            for _ in range(repeat):
                a, pa = first_page(browser, url, SIZES[0])
                b, pb = first_page(browser, url, SIZES[0])
                time.sleep(4.0)  # let both finish before the next pair
                pa.context.close()  # type: ignore[attr-defined]
                pb.context.close()  # type: ignore[attr-defined]
                pairs.append((a, b))
            if repeat:
                print("overlapping visitors (B opens at A's headline): " + ", ".join(
                    f"{a:.2f}/{b:.2f}" for a, b in pairs) + " s (A/B); load average "
                    + open("/proc/loadavg").read().split()[0])
                # Returning visitors: the scripts are in the browser's cache (one context).
                print(visitors_line("returning visitors, scripts cached", *alternate(
                    browser, url, floor_url, repeat, page.context)))  # type: ignore[attr-defined]
            if not args.no_run:
                before = page.locator("#metric-cost").first.inner_text()
                page.get_by_label("Policy", exact=True).select_option("lyapunov")
                page.get_by_label("V", exact=True).fill(f"{DEFAULT_V:g}")
                # The comparison choice is the MultiChoice's; leave it at the default and
                # report which were run.
                t0 = time.perf_counter()
                page.locator(".wb-run button").click()
                page.locator("#wb-progress").first.wait_for()
                deadline = time.monotonic() + 900
                while time.monotonic() < deadline:
                    now = page.locator("#metric-cost").first.inner_text()
                    progress = page.locator("#wb-progress")
                    if now != before and not (progress.count() and progress.first.is_visible()):
                        break
                    time.sleep(0.5)
                run_s = time.perf_counter() - t0
                print(f"one Run (lyapunov V={DEFAULT_V:g} and the app's default comparison "
                      f"policies not yet run on this server): {run_s:.1f} s = "
                      f"{run_s / warm:.0f} x the warm "
                      "first page")
            if args.screenshots is not None:
                # A fresh session per size: it opens on the newest stored run (the one just
                # made, with its stored comparisons), so no update is in flight.
                args.screenshots.mkdir(parents=True, exist_ok=True)
                for w, h in SIZES:
                    _, shot = first_page(browser, url, (w, h))
                    for tab in TABS:
                        shot.locator(".bk-tab", has_text=tab).first.click()
                        shot.locator(MARKERS[tab]).first.wait_for()
                        if tab == "Quote":  # a quote with its defaults: the table shows
                            shot.locator(".wb-quote-button button").click()
                            shot.locator(".wb-quote-options .tabulator-row").first.wait_for()
                        if tab == "Runs":  # the two newest runs side by side
                            rows = shot.locator(".wb-runs .tabulator-row")
                            for i in range(min(rows.count(), 2)):
                                rows.nth(i).locator("input[type=checkbox]").click()
                            shot.locator(".wb-runs-compare button").click()
                            shot.locator(".wb-runs-compared .tabulator-row").first.wait_for()
                        time.sleep(4.0)
                        shot.screenshot(path=str(args.screenshots / f"app_{tab.lower()}_{w}.png"))
                        if tab in BELOW:
                            # The template scrolls its main area, not the page: scroll to the
                            # lower half of the tab for a second picture.
                            shot.locator(BELOW[tab]).first.scroll_into_view_if_needed()
                            time.sleep(2.0)
                            shot.screenshot(
                                path=str(args.screenshots / f"app_{tab.lower()}_lower_{w}.png"))
                print(f"screenshots in {args.screenshots}")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if args.keep_db is not None:
            shutil.copy(db, args.keep_db)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
