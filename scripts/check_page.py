"""Open a run's report.html in headless Chromium at 1280 and 390 pixels wide and check it as tests/test_browser.py
checks the committed run's page: the page never scrolls sideways, every image and plot is drawn, no console error,
no network request, the run's summary in the first screen.

    .venv/bin/python scripts/check_page.py RUN_DIR [--shots DIR] [--name report-after] [--fresh]
    make page RUN=outputs/<run folder> [ARGS="--shots docs --name report-after"]

It prints one line per width (the page's height, and each check) and exits 1, saying which checks failed and at which
width, when any does; 2 when the page cannot be checked (not a run folder, no Playwright or chromium). A run folder
without report.html (or any, with --fresh) is copied into a temporary folder and its page written there as
`bytesup report RUN --html` writes it: the run folder is never written to. With --shots it saves the first screen at
each width as DIR/<name>-1280.png and DIR/<name>-390.png, framed as the README's docs/report-*.png (1280 x 800 and
390 x 844 CSS pixels).

Playwright comes with the test extra and chromium with Debian's package: `make test` installs both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bytesup.errors import BytesupError  # noqa: E402
from bytesup.run import pagecheck  # noqa: E402

FAILED, UNCHECKED = 1, 2


def check(run_dir: Path, shots: Path | None, name: str, fresh: bool) -> int:
    problems: list[str] = []
    with pagecheck.report_page(run_dir, fresh) as (page_path, written):
        if written:
            why = "with --fresh" if fresh and (run_dir / "report.html").is_file() else "it has no report.html"
            print(f"{run_dir} ({why}): checking the page `bytesup report --html` writes, in a temporary copy of the "
                  "run folder; the run folder is left as it is.")
        shot_paths = []
        with pagecheck.open_browser() as browser:
            for width, height in pagecheck.SCREENS.items():
                seen = pagecheck.visit(browser, page_path, width, height)
                found = pagecheck.measure(seen)
                print(found.line())
                problems += [f"at {width} px, {p}" for p in found.problems()]
                if shots is not None:
                    shot_paths.append(pagecheck.screenshot(seen.page, shots / f"{name}-{width}.png"))
                seen.page.close()
    if shot_paths:
        print("wrote " + ", ".join(str(p) for p in shot_paths))
    widths = " and ".join(f"{w}" for w in pagecheck.SCREENS)
    if problems:
        print(f"report.html of {run_dir} fails {len(problems)} check{'s' if len(problems) != 1 else ''}: "
              + "; ".join(problems) + ". Open the page in a browser at that width to see it; it is written by "
              "src/bytesup/run/report.py from the run's JSON, with the renderer of src/bytesup/store/render.py.",
              file=sys.stderr)
        return FAILED
    print(f"report.html of {run_dir} passes every check at {widths} px.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder written by `bytesup run`")
    parser.add_argument("--shots", type=Path, metavar="DIR", help="save the first screen at each width in DIR")
    parser.add_argument("--name", default="report", help="the screenshots' name: DIR/NAME-1280.png, DIR/NAME-390.png")
    parser.add_argument("--fresh", action="store_true",
                        help="check a report.html written afresh in a temporary copy, even where the run has one")
    args = parser.parse_args(argv)
    try:
        return check(args.run_dir, args.shots, args.name, args.fresh)
    except BytesupError as e:
        print(f"The page of {args.run_dir} was not checked: {e}", file=sys.stderr)
        return UNCHECKED


if __name__ == "__main__":
    sys.exit(main())
