"""report.html and the history page opened in a real browser: headless Chromium (Debian's package),
driven by Playwright with the system browser.

`make test` installs chromium with apt where it can (as root); elsewhere these tests are skipped
with the reason. With BYTESUP_REQUIRE_BROWSER=1 (set by .ci/run) a missing browser is a failure."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_check import ALL
from test_history import make_run
from test_report import HOSTILE, hostile_run

from bytesup.check import history as hist
from bytesup.store.render import anchor
from bytesup.run.report import write_run_report
from bytesup.store.runs import load_run

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]


def _unavailable(reason: str):
    if os.environ.get("BYTESUP_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (BYTESUP_REQUIRE_BROWSER=1: the browser tests must run here)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (make install-test installs it)")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        _unavailable("no chromium on PATH (make test installs Debian's chromium with apt-get when run as root)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=FLAGS)
        yield browser
        browser.close()


@dataclass
class Visit:
    page: object
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def visit(browser, path: Path, width: int = 1100, height: int = 800) -> Visit:
    """Open a local file; record console errors, uncaught errors and every request besides the file itself."""
    page = browser.new_page(viewport={"width": width, "height": height})
    seen = Visit(page)
    page.on("console", lambda m: seen.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.console_errors.append(str(e)))
    url = path.resolve().as_uri()
    page.on("request", lambda r: seen.requests.append(r.url) if r.url != url else None)
    page.goto(url, wait_until="load")
    return seen


def test_the_checker_sees_a_page_that_fetches_or_errs(chromium, tmp_path):
    """The assertions below can fail: a page with an outside image and a script error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><h1>x</h1><img src="http://192.0.2.1/x.png"><script>undefined_name()</script>'
                   '<div style="width: 2000px">wide</div>', encoding="utf-8")
    seen = visit(chromium, bad, width=390)
    assert seen.requests == ["http://192.0.2.1/x.png"]
    assert any("undefined_name" in e for e in seen.console_errors)
    found = layout(seen.page)
    assert found["scrollWidth"] > found["innerWidth"] and found["images"] == [[True, 0]] and found["summary"] is None
    seen.page.close()


WIDTHS = (1280, 390)
COMMITTED = Path(__file__).resolve().parents[1] / "outputs" / "2026-12-01-cpu2-smollm2"


def layout(page) -> dict:
    """What the reader sees of the page's layout: its widths, the first screen, and each image and plot's size."""
    return page.evaluate("""() => {
        const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.width, r.height]; };
        const summary = document.querySelector('header.summary table.summary');
        return {
            scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
            innerHeight: window.innerHeight,
            summary: summary ? box(summary) : null, title: box(document.querySelector('h1')),
            images: Array.from(document.images).map(i => [i.complete, i.naturalWidth]),
            plots: Array.from(document.querySelectorAll('figure.plot svg')).map(e => box(e).slice(1)),
        };
    }""")


def check_page(seen: Visit, plots: int, summary: bool = True) -> dict:
    """The checks every page passes at every width: no console error, no request, no horizontal overflow of the
    page, every image and plot drawn with a size, and (for a run's page) its summary in the first screen."""
    assert seen.console_errors == [] and seen.requests == []
    found = layout(seen.page)
    assert found["scrollWidth"] <= found["innerWidth"], found["scrollWidth"]
    assert all(done and width > 0 for done, width in found["images"])
    assert len(found["plots"]) == plots > 0 and all(w > 0 and h > 0 for w, h in found["plots"])
    if summary:
        top, width, height = found["summary"]
        assert 0 <= found["title"][0] and 0 < top < found["innerHeight"] and width > 0 and height > 0
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_report_html_in_chromium(chromium, tmp_path, width):
    run = hostile_run(tmp_path / "run", *ALL)
    pages, _ = write_run_report(run, None, run_checks=True, with_html=True)
    seen = visit(chromium, pages[1], width=width, height=844)
    page = seen.page
    loaded = load_run(run)
    check_page(seen, sum(len(r.plots) for r in loaded.results.values()))
    for result in loaded.results.values():
        assert page.locator(f"h2#{anchor(result.title)}").count() == 1, result.lesson_id
    assert page.locator("section.lesson").count() == len(loaded.results)
    assert page.locator("table.checks").count() >= 1
    assert page.locator("table.checks td", has_text="pass").count() > 0
    # The injected name is text on the page, and no script came with it.
    assert HOSTILE in page.inner_text("body")
    assert page.locator("script").count() == 0
    page.screenshot(path=str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 10_000
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_committed_runs_report_in_chromium(chromium, tmp_path, width):
    """The reference run's page: what a fresh `make run` writes, from the committed recordings' results."""
    run = tmp_path / COMMITTED.name
    shutil.copytree(COMMITTED, run)
    pages, _ = write_run_report(run, None, run_checks=True, with_html=True)
    seen = visit(chromium, pages[1], width=width, height=844)
    found = check_page(seen, sum(len(r.plots) for r in load_run(run).results.values()))
    # Folded tables open on a click, and a wide one scrolls inside its own box, not the page.
    page = seen.page
    page.locator("details.table > summary").first.click()
    boxes = page.eval_on_selector_all(".table-box", "els => els.map(e => [e.scrollWidth, e.clientWidth])")
    assert boxes and page.evaluate("document.documentElement.scrollWidth") <= found["innerWidth"]
    page.close()


def test_the_committed_runs_report_prints_within_the_paper(chromium, tmp_path):
    """On A4 (718 CSS pixels between the margins), with the print stylesheet: no table reaches past the paper."""
    run = tmp_path / COMMITTED.name
    shutil.copytree(COMMITTED, run)
    pages, _ = write_run_report(run, None, run_checks=False, with_html=True)
    seen = visit(chromium, pages[1], width=718, height=1000)
    page = seen.page
    page.emulate_media(media="print")
    wider = page.evaluate("Array.from(document.querySelectorAll('table, figure, pre, p, li'))"
                          ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).length")
    assert wider == 0 and page.evaluate("document.documentElement.scrollWidth") <= 718
    assert page.pdf(format="A4")[:4] == b"%PDF"
    page.close()


def test_history_page_in_chromium(chromium, tmp_path):
    root = tmp_path / "outputs"
    for n, (host, scale) in enumerate([("vm", 1.0), ("vm", 1.4), ("vm", 1.41), (HOSTILE, 2.0), (HOSTILE, 2.1)]):
        make_run(root / f"run{n}", n + 1, host=host, decode_scale=scale)
    (root / "scratch").mkdir()
    found = hist.find_runs([root])
    out = tmp_path / "history.html"
    hist.write_history(found, out, as_html=True)
    groups = hist.group_runs(found.runs)
    assert len(groups) == 2
    for width in WIDTHS[1:]:
        narrow = visit(chromium, out, width=width, height=844)
        check_page(narrow, sum(len(hist.group_plots(g)) for g in groups), summary=False)
        narrow.page.close()
    seen = visit(chromium, out, width=1300, height=900)
    page = seen.page
    check_page(seen, sum(len(hist.group_plots(g)) for g in groups), summary=False)
    # Each point of a plot is a link to its run's page.
    links = page.eval_on_selector_all("figure.plot svg a", "els => els.map(e => e.getAttribute('xlink:href') || e.getAttribute('href'))")
    assert links and all(link.startswith("./outputs/run") for link in links)
    body = page.inner_text("body")
    assert "skipped 1 folder that is not a run" in body and HOSTILE in body and page.locator("script").count() == 0
    assert page.locator("h2", has_text="Runs").count() == 1 and page.locator("tbody tr").count() >= len(found.runs)
    page.screenshot(path=str(tmp_path / "history.png"))
    assert (tmp_path / "history.png").stat().st_size > 10_000
    page.close()
