"""report.html and the history page opened in a real browser: headless Chromium (Debian's package),
driven by Playwright with the system browser, measured by bytesup.run.pagecheck; and scripts/check_page.py, which
puts any run folder's page through the same checks (`make page RUN=...`).

`make test` installs chromium with apt where it can (as root); elsewhere these tests are skipped
with the reason. With BYTESUP_REQUIRE_BROWSER=1 (set by .ci/run) a missing browser is a failure."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from test_check import ALL
from test_history import make_run
from test_report import HOSTILE, hostile_run

from bytesup.check import history
from bytesup.store.render import anchor
from bytesup.run import pagecheck
from bytesup.run.report import write_run_report
from bytesup.store.runs import load_run

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = tuple(pagecheck.SCREENS)  # 1280 and 390
COMMITTED = ROOT / "outputs" / "2026-12-01-cpu2-smollm2"
CHECK_PAGE = ROOT / "scripts" / "check_page.py"


def _unavailable(reason: str):
    if os.environ.get("BYTESUP_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (BYTESUP_REQUIRE_BROWSER=1: the browser tests must run here)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium():
    try:
        pagecheck.find_browser()
    except pagecheck.BrowserUnavailable as e:
        _unavailable(str(e))
    with pagecheck.open_browser() as browser:
        yield browser


def visit(browser, path: Path, width: int, height: int | None = None) -> pagecheck.Visit:
    """Open a local file in a window of the given width (and the height of that width's screen)."""
    return pagecheck.visit(browser, path, width, height or pagecheck.SCREENS.get(width, 844))


def test_the_checker_sees_a_page_that_fetches_or_errs(chromium, tmp_path):
    """The assertions below can fail: a page with an outside image and a script error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><h1>x</h1><img src="http://192.0.2.1/x.png"><script>undefined_name()</script>'
                   '<div style="width: 2000px">wide</div>', encoding="utf-8")
    seen = visit(chromium, bad, width=390)
    assert seen.requests == ["http://192.0.2.1/x.png"]
    assert any("undefined_name" in e for e in seen.console_errors)
    found = pagecheck.measure(seen)
    assert found.scroll_width > found.width and found.images == [(True, 0)] and found.summary is None
    problems = found.problems()
    for words in ("scrolls sideways", "1 of 1 images did not load", "console errors", "1 network requests",
                  "has no summary"):
        assert sum(words in p for p in problems) == 1, (words, problems)
    assert len(problems) == 5
    line = found.line()  # the failed image is a console error too, beside the script's
    assert line.startswith("390 px: page height 844 px, overflow yes, images loaded 0/1, plots drawn 0/0, ")
    assert f"console errors {len(seen.console_errors)}, network requests 1, summary in first screen no" in line
    seen.page.close()


def test_the_checker_sees_a_summary_below_the_first_screen_and_a_plot_without_a_size(chromium, tmp_path):
    bad = tmp_path / "low.html"
    bad.write_text('<!DOCTYPE html><h1>x</h1><div style="height: 900px"></div><header class="summary">'
                   '<table class="summary"><tr><td>machine</td><td>vm</td></tr></table></header>'
                   '<figure class="plot"><svg width="0" height="0"></svg></figure>'
                   '<figure class="plot"><svg width="10" height="10"></svg></figure>', encoding="utf-8")
    for width in WIDTHS:
        seen = visit(chromium, bad, width=width)
        found = pagecheck.measure(seen)
        assert found.summary is not None and not found.summary_in_first_screen and found.plots_drawn == 1
        assert found.page_height > 900 and not found.overflows
        problems = found.problems()
        assert len(problems) == 2 and "summary is not in the first screen" in problems[1], problems
        assert problems[0] == "1 of 2 plots are drawn without a size"
        seen.page.close()
    # Without the title above it, a summary in the first screen is not taken for a run's page either.
    bad.write_text('<!DOCTYPE html><header class="summary"><table class="summary"><tr><td>machine</td></tr></table>'
                   "</header>", encoding="utf-8")
    seen = visit(chromium, bad, width=390)
    assert pagecheck.measure(seen).problems() == ["the page has no title (h1)"]
    assert pagecheck.measure(seen, summary=False).problems() == []
    seen.page.close()


def check_page(seen: pagecheck.Visit, plots: int, summary: bool = True) -> pagecheck.PageCheck:
    """The checks every page passes at every width: no console error, no request, no horizontal overflow of the
    page, every image and plot drawn with a size, and (for a run's page) its summary in the first screen."""
    found = pagecheck.measure(seen, summary=summary)
    assert found.console_errors == [] and found.requests == []
    assert found.scroll_width <= found.width, found.scroll_width
    assert all(done and width > 0 for done, width in found.images)
    assert len(found.plots) == plots > 0 and all(w > 0 and h > 0 for w, h in found.plots)
    if summary:
        assert found.summary is not None and found.title is not None
        top, width, height = found.summary
        assert 0 <= found.title[0] and 0 < top < found.screen_height and width > 0 and height > 0
    assert found.problems() == [], found.line()
    return found


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory) -> tuple[Path, Path]:
    """Every lesson's fixture in one run with a hostile name, and its report.html with the checks, written once for
    the widths that open it (none writes to it): the run folder and the page."""
    run = hostile_run(tmp_path_factory.mktemp("hostile") / "run", *ALL)
    pages, _ = write_run_report(run, None, run_checks=True, with_html=True)
    return run, pages[1]


@pytest.fixture(scope="module")
def committed_page(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of the committed run with report.html and its checks written, once for the widths that open it."""
    run = tmp_path_factory.mktemp("committed") / COMMITTED.name
    shutil.copytree(COMMITTED, run)
    pages, _ = write_run_report(run, None, run_checks=True, with_html=True)
    return run, pages[1]


@pytest.mark.parametrize("width", WIDTHS)
def test_report_html_in_chromium(chromium, hostile_page, tmp_path, width):
    run, report = hostile_page
    seen = visit(chromium, report, width=width)
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
    assert pagecheck.screenshot(page, tmp_path / "report.png").stat().st_size > 10_000
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_committed_runs_report_in_chromium(chromium, committed_page, width):
    """The reference run's page: what a fresh `make run` writes, from the committed recordings' results."""
    run, report = committed_page
    seen = visit(chromium, report, width=width)
    found = check_page(seen, sum(len(r.plots) for r in load_run(run).results.values()))
    # Folded tables open on a click, and a wide one scrolls inside its own box, not the page.
    page = seen.page
    page.locator("details.table > summary").first.click()
    boxes = page.eval_on_selector_all(".table-box", "els => els.map(e => [e.scrollWidth, e.clientWidth])")
    assert boxes and page.evaluate("document.documentElement.scrollWidth") <= found.width
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
    found = history.find_runs([root])
    out = tmp_path / "history.html"
    history.write_history(found, out, as_html=True)
    groups = history.group_runs(found.runs)
    assert len(groups) == 2
    for width in WIDTHS[1:]:
        narrow = visit(chromium, out, width=width)
        check_page(narrow, sum(len(history.group_plots(g)) for g in groups), summary=False)
        narrow.page.close()
    seen = visit(chromium, out, width=1300, height=900)
    page = seen.page
    check_page(seen, sum(len(history.group_plots(g)) for g in groups), summary=False)
    # Each point of a plot is a link to its run's page.
    links = page.eval_on_selector_all("figure.plot svg a", "els => els.map(e => e.getAttribute('xlink:href') || e.getAttribute('href'))")
    assert links and all(link.startswith("./outputs/run") for link in links)
    body = page.inner_text("body")
    assert "skipped 1 folder that is not a run" in body and HOSTILE in body and page.locator("script").count() == 0
    assert page.locator("h2", has_text="Runs").count() == 1 and page.locator("tbody tr").count() >= len(found.runs)
    assert pagecheck.screenshot(page, tmp_path / "history.png").stat().st_size > 10_000
    page.close()


# --- scripts/check_page.py: any run folder's page through the same checks ---------------------------------------

def check_page_script(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK_PAGE), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


def test_check_page_passes_the_committed_run_and_leaves_its_folder_alone(chromium, tmp_path):
    run = tmp_path / COMMITTED.name
    shutil.copytree(COMMITTED, run)
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*"))
    res = check_page_script(run, "--shots", tmp_path / "shots", "--name", "report-after")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*")) == before  # no report.html written
    lines = [line for line in res.stdout.splitlines() if " px: page height " in line]
    assert [line.split(" px:")[0] for line in lines] == ["1280", "390"]
    assert all("overflow no" in line and "console errors 0, network requests 0, summary in first screen yes" in line
               for line in lines), res.stdout
    assert "temporary copy" in res.stdout and "passes every check at 1280 and 390 px" in res.stdout
    for width, height in pagecheck.SCREENS.items():  # the first screen, the size of docs/report-*.png
        png = (tmp_path / "shots" / f"report-after-{width}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (width, height)


def test_check_page_fails_a_page_with_defects_and_names_each(chromium, tmp_path):
    """A good report.html with a too-wide element and a broken image put in: the script checks the run's own page,
    exits 1, and names both checks at both widths in one paragraph."""
    run = hostile_run(tmp_path / "run", *ALL)
    pages, _ = write_run_report(run, None, run_checks=False, with_html=True)
    defects = '<div style="width: 3000px">wide</div><img src="data:image/png;base64,AAAA" alt="broken">'
    pages[1].write_text(pages[1].read_text(encoding="utf-8").replace("</body>", defects + "</body>", 1),
                        encoding="utf-8")
    res = check_page_script(run)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "temporary copy" not in res.stdout  # the run's own report.html is what was checked
    lines = [line for line in res.stdout.splitlines() if " px: page height " in line]
    assert len(lines) == 2 and all("overflow yes, images loaded 0/1" in line and "network requests 0, summary in "
                                   "first screen yes" in line for line in lines), res.stdout
    message = res.stderr.strip()
    assert "\n" not in message and message.startswith(f"report.html of {run} fails "), message
    for width in WIDTHS:
        assert f"at {width} px, the page scrolls sideways (3," in message, message
        assert f"at {width} px, 1 of 1 images did not load" in message, message


def test_check_page_says_what_is_not_a_run(tmp_path):
    res = check_page_script(tmp_path / "nothing")
    assert res.returncode == 2 and "was not checked" in res.stderr and "does not exist" in res.stderr, res.stderr
