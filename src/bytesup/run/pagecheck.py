"""A run's report.html (or any page of ours) opened in headless Chromium and measured as a reader sees it: whether
the page scrolls sideways, whether every image and plot is drawn, the console errors and network requests it
makes, whether the run's summary is in the first screen, and the page's height; and screenshots of it.

tests/test_browser.py and scripts/check_page.py (`make page RUN=...`) both check pages with these functions.
Playwright drives the system's chromium (Debian's package); it is installed with the test extra only, so it is
imported inside the functions here, and a missing Playwright or chromium is a `BrowserUnavailable` that says what to
do. Nothing here is imported by `bytesup run` or `bytesup report`."""

from __future__ import annotations

import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bytesup.errors import BytesupError

# Chromium without a sandbox (it runs as root in containers), a GPU, or any traffic of its own: the only requests a
# page shows are those the page makes.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
# The screens a page is checked on, width: height in CSS pixels (a laptop and a phone); the README's screenshots
# (docs/report-*.png) are the first screen at these sizes.
SCREENS: dict[int, int] = {1280: 800, 390: 844}
SUMMARY = "header.summary table.summary"
HOW_TO_INSTALL = ("`make test` installs both (the test extra with `pip install -e .[test]`, and Debian's chromium "
                  "with apt-get when run as root); elsewhere install chromium as root with `apt-get install chromium` "
                  "and Playwright with `.venv/bin/python -m pip install -e .[test]`.")


class BrowserUnavailable(BytesupError):
    """Playwright or chromium is not installed here: the page cannot be opened in a browser."""


def chromium_path() -> str:
    """The system chromium Playwright drives; BrowserUnavailable where there is none on PATH."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise BrowserUnavailable("Checking a page in a browser needs chromium, and there is no `chromium` or "
                                 f"`chromium-browser` on PATH. {HOW_TO_INSTALL}")
    return found


def find_browser() -> tuple[Any, str]:
    """(Playwright's sync_playwright, the chromium it drives); BrowserUnavailable where either is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise BrowserUnavailable(f"Checking a page in a browser needs Playwright, which is not installed in this "
                                 f"Python ({sys.executable}). {HOW_TO_INSTALL}") from None
    return sync_playwright, chromium_path()


@contextmanager
def open_browser() -> Iterator[Any]:
    """Headless chromium, driven by Playwright, closed on leaving. BrowserUnavailable where Playwright or chromium
    is missing; a BytesupError where chromium is there but does not start."""
    sync_playwright, executable = find_browser()
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=executable, args=FLAGS)
        except Exception as e:  # Playwright's own Error, whose message holds chromium's log
            raise BytesupError(f"{executable} did not start in headless mode ({str(e).strip().splitlines()[0]}). "
                               "Run it by hand with --headless --no-sandbox to read why, or reinstall it "
                               "(`apt-get install --reinstall chromium`).") from e
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Visit:
    """An open page, with every console error and uncaught error it raised, and every request besides its own file."""
    page: Any
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def visit(browser: Any, path: Path, width: int, height: int) -> Visit:
    """Open a local file in a window of width x height CSS pixels, and wait until it and its images have loaded."""
    page = browser.new_page(viewport={"width": width, "height": height})
    seen = Visit(page)
    page.on("console", lambda m: seen.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.console_errors.append(str(e)))
    url = Path(path).resolve().as_uri()
    page.on("request", lambda r: seen.requests.append(r.url) if r.url != url else None)
    page.goto(url, wait_until="load")
    return seen


LAYOUT = """() => {
    const box = e => { if (!e) return null; const r = e.getBoundingClientRect(); return [r.top, r.width, r.height]; };
    return {
        scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
        innerHeight: window.innerHeight, scrollHeight: document.documentElement.scrollHeight,
        summary: box(document.querySelector('%s')), title: box(document.querySelector('h1')),
        images: Array.from(document.images).map(i => [i.complete, i.naturalWidth]),
        plots: Array.from(document.querySelectorAll('figure.plot svg')).map(e => box(e).slice(1)),
    };
}""" % SUMMARY


def layout(page: Any) -> dict[str, Any]:
    """What the reader sees of the page's layout: its widths and height, the first screen, the title's and the
    summary's boxes ([top, width, height], null where missing), and each image's and plot's size."""
    found: dict[str, Any] = page.evaluate(LAYOUT)
    return found


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


@dataclass
class PageCheck:
    """One page measured at one width. `problems()` is every check it fails, each named; empty when it passes."""
    width: int
    screen_height: int
    page_height: int
    scroll_width: int
    images: list[tuple[bool, int]]
    plots: list[tuple[float, float]]
    console_errors: list[str]
    requests: list[str]
    summary: tuple[float, float, float] | None
    title: tuple[float, float, float] | None
    wants_summary: bool = True

    @property
    def overflows(self) -> bool:
        return self.scroll_width > self.width

    @property
    def images_loaded(self) -> int:
        return sum(1 for done, natural_width in self.images if done and natural_width > 0)

    @property
    def plots_drawn(self) -> int:
        return sum(1 for w, h in self.plots if w > 0 and h > 0)

    @property
    def summary_in_first_screen(self) -> bool:
        """The summary has a size and its top lies inside the first screen, under a title (h1) not scrolled away."""
        if self.summary is None or self.title is None:
            return False
        top, width, height = self.summary
        return self.title[0] >= 0 and 0 < top < self.screen_height and width > 0 and height > 0

    def problems(self) -> list[str]:
        found = []
        if self.overflows:
            found.append(f"the page scrolls sideways ({self.scroll_width:,} px wide in a {self.width:,} px window)")
        if self.images_loaded < len(self.images):
            found.append(f"{len(self.images) - self.images_loaded} of {len(self.images)} images did not load")
        if self.plots_drawn < len(self.plots):
            found.append(f"{len(self.plots) - self.plots_drawn} of {len(self.plots)} plots are drawn without a size")
        if self.console_errors:
            found.append(f"{len(self.console_errors)} console errors (the first: {self.console_errors[0]})")
        if self.requests:
            found.append(f"{len(self.requests)} network requests (the first: {self.requests[0]})")
        if self.wants_summary and not self.summary_in_first_screen:
            found.append(f"the page has no summary ({SUMMARY})" if self.summary is None
                         else "the page has no title (h1)" if self.title is None
                         else f"the summary is not in the first screen (its top at {self.summary[0]:,.0f} px of "
                              f"{self.screen_height:,})")
        return found

    def line(self) -> str:
        """One line of what was measured, e.g. `1280 px: page height 19,667 px, overflow no, images loaded 0/0, ...`."""
        parts = [f"{self.width} px: page height {self.page_height:,} px", f"overflow {yes(self.overflows)}",
                 f"images loaded {self.images_loaded}/{len(self.images)}",
                 f"plots drawn {self.plots_drawn}/{len(self.plots)}",
                 f"console errors {len(self.console_errors)}", f"network requests {len(self.requests)}"]
        if self.wants_summary:
            parts.append(f"summary in first screen {yes(self.summary_in_first_screen)}")
        return ", ".join(parts)


def measure(seen: Visit, summary: bool = True) -> PageCheck:
    """Measure an open page; `summary`: whether the page is a run's, whose summary must be in the first screen."""
    found = layout(seen.page)
    return PageCheck(
        width=found["innerWidth"], screen_height=found["innerHeight"], page_height=found["scrollHeight"],
        scroll_width=found["scrollWidth"], images=[(bool(d), int(w)) for d, w in found["images"]],
        plots=[(w, h) for w, h in found["plots"]], console_errors=list(seen.console_errors),
        requests=list(seen.requests), summary=tuple(found["summary"]) if found["summary"] else None,
        title=tuple(found["title"]) if found["title"] else None, wants_summary=summary)


def screenshot(page: Any, path: Path, full_page: bool = False) -> Path:
    """The first screen (the window's size, as in docs/report-*.png) or, with `full_page`, the whole page as PNG."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    return path


@contextmanager
def report_page(run_dir: Path, fresh: bool = False) -> Iterator[tuple[Path, bool]]:
    """(report.html of the run, whether it was written here). A run folder without report.html (or any, with
    `fresh`) is copied into a temporary folder and its report written there as `bytesup report RUN --html` writes
    it, with the checks; the run folder itself is never written to. The copy is removed on leaving."""
    from bytesup.run.report import write_run_report
    from bytesup.store.runs import load_run

    run_dir = Path(run_dir)
    load_run(run_dir)  # a clear BytesupError for what is not a run folder
    page = run_dir / "report.html"
    if page.is_file() and not fresh:
        yield page, False
        return
    with tempfile.TemporaryDirectory(prefix="bytesup-page-") as tmp:
        copy = Path(tmp) / run_dir.resolve().name
        shutil.copytree(run_dir, copy)
        pages, _ = write_run_report(copy, None, run_checks=True, with_html=True)
        yield pages[1], True
