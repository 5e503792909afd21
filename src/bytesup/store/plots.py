"""Draw a lesson's plots (PNG and SVG) from the plot records in its JSON."""

from __future__ import annotations

import io
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytesup.store.render import plot_files
from bytesup.store.results import LessonResult, Plot
from bytesup.files import write_bytes_atomic


# A plot whose x_label is this has dates on its x axis: x counts days since 1970-01-01 (UTC), matplotlib's own
# date numbers, and its ticks are written as dates.
DATE_AXIS = "date (UTC)"


@dataclass(frozen=True)
class Mark:
    """A vertical line at x with its label (a move judged real on a history plot, and what changed)."""

    x: float
    label: str


def _figure(plot: Plot, urls: "list[str] | None" = None, marks: "list[Mark] | None" = None):
    """The plot drawn. `urls`: a link for each point of the first series (an SVG <a> around its marker);
    `marks`: vertical lines with labels."""
    import matplotlib

    matplotlib.use("Agg")
    # A fixed salt makes SVG element ids the same on every rendering, so replays rewrite identical files.
    matplotlib.rcParams["svg.hashsalt"] = "bytesup"
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for s in plot.series:
        if s.style == "steps":  # a staircase: each value holds until the next x
            ax.step(s.x, s.y, where="post", label=s.label)
        else:
            style = {"line": "-o", "points": "o", "dashed": "--"}.get(s.style, "-o")
            ax.plot(s.x, s.y, style, label=s.label, markersize=4)
        if s.y_min is not None and s.y_max is not None:
            ax.fill_between(s.x, s.y_min, s.y_max, alpha=0.2)
    if urls and plot.series:
        first = plot.series[0]
        points = ax.scatter(first.x, first.y, s=36, zorder=3, color=ax.lines[0].get_color() if ax.lines else None)
        points.set_urls(list(urls)[:len(first.x)])
    for n, mark in enumerate(marks or []):
        ax.axvline(mark.x, color="#b00", linestyle=":", linewidth=1)
        ax.annotate(mark.label, xy=(mark.x, 1), xycoords=("data", "axes fraction"), xytext=(3, -4 - 11 * (n % 3)),
                    textcoords="offset points", fontsize=7, color="#b00", va="top", ha="left")
    if plot.x_label == DATE_AXIS:
        import matplotlib.dates as mdates

        locator = mdates.AutoDateLocator(minticks=2, maxticks=8)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    if plot.log_x:
        ax.set_xscale("log")
    if plot.log_y:
        ax.set_yscale("log")
    ax.set_title(plot.title)
    ax.set_xlabel(plot.x_label)
    ax.set_ylabel(plot.y_label)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, plt


# Drawing is most of the time a page or a lesson's files take, and a record draws the same bytes every time (the
# fixed salt above): a process that writes several pages or runs draws each one once. The last DRAWINGS_KEPT
# figures' files are kept, each under the record's every value and the links and marks it was drawn with, and in it
# each file by its format: "png", or ("svg", the svg.fonttype it was written with).
DRAWINGS_KEPT = 128
_drawings: OrderedDict[tuple, dict[Any, bytes]] = OrderedDict()
_METADATA_OF = {"png": {"Software": None}, "svg": {"Date": None}}
# A page's plots write their text as text (svg.fonttype "none"), the lesson's files as glyph outlines (matplotlib's
# "path"): see `svg_markup`. A lesson's files are drawn with the page's beside them, on the same figure (`write_plots`).
PAGE_FONTTYPE = "none"


def _file_format(fmt: str | tuple[str, str]) -> Any:
    """A format as `_drawn` takes it ("png", "svg", or ("svg", a fonttype)) as it is kept: an SVG with its fonttype."""
    import matplotlib

    return ("svg", matplotlib.rcParams["svg.fonttype"]) if fmt == "svg" else fmt


def _drawn(plot: Plot, formats: tuple[str | tuple[str, str], ...], urls: "list[str] | None" = None,
           marks: "list[Mark] | None" = None) -> tuple[bytes, ...]:
    """The plot's file in each format ("png", "svg" in the current svg.fonttype, or ("svg", a fonttype)), the missing
    ones drawn on one figure in that order (see `_figure`)."""
    import matplotlib

    wanted = [_file_format(fmt) for fmt in formats]
    key = (repr(plot.model_dump()), tuple(urls or ()), tuple(marks or ()))
    kept = _drawings.setdefault(key, {})
    _drawings.move_to_end(key)
    missing = [fmt for fmt in wanted if fmt not in kept]
    if missing:
        fig, plt = _figure(plot, urls, marks)
        try:
            for fmt in missing:
                buf = io.BytesIO()
                if fmt == "png":
                    fig.savefig(buf, format="png", metadata=_METADATA_OF["png"])
                else:
                    with matplotlib.rc_context({"svg.fonttype": fmt[1]}):
                        fig.savefig(buf, format="svg", metadata=_METADATA_OF["svg"])
                kept[fmt] = buf.getvalue()
        finally:
            plt.close(fig)
    while len(_drawings) > DRAWINGS_KEPT:
        _drawings.popitem(last=False)
    return tuple(kept[fmt] for fmt in wanted)


def write_plots(result: LessonResult, run_dir: Path) -> list[Path]:
    """The lesson's plots as PNG and SVG files under `run_dir`; each figure also gives the SVG the run's page draws of it
    (kept, not written), so that a run writing its page in the same process does not draw the figure again."""
    written = []
    for plot in result.plots:
        files = _drawn(plot, ("png", "svg", ("svg", PAGE_FONTTYPE)))[:2]
        for rel, data in zip(plot_files(result, plot.name), files, strict=True):
            write_bytes_atomic(run_dir / rel, data)
            written.append(run_dir / rel)
    return written


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'((?:xlink:)?href="#|url\(#)')
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.S)
_STYLE = re.compile(r"<style([^>]*)>\s*\*\s*\{")


def svg_markup(plot: Plot, prefix: str = "", urls: "list[str] | None" = None, marks: "list[Mark] | None" = None) -> str:
    """The plot as an <svg> element to put inside an HTML page (the XML prolog and doctype dropped).

    With `prefix` (unique in the page), for a page that holds several plots: every id in it begins with `prefix`
    and every reference follows, the root is `<prefix>svg` and its style rule applies inside it alone, text is
    drawn as text rather than glyph outlines, and the metadata is dropped. `urls` and `marks`: see `_figure`."""
    [drawn] = _drawn(plot, (("svg", PAGE_FONTTYPE) if prefix else "svg",), urls, marks)
    text = drawn.decode("utf-8")
    text = text[text.index("<svg"):]
    if not prefix:
        return text
    text = _METADATA.sub("", text)
    text = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', text)
    text = _REF.sub(lambda m: m.group(1) + prefix, text)
    text = text.replace("<svg ", f'<svg id="{prefix}svg" ', 1)
    return _STYLE.sub(lambda m: f"<style{m.group(1)}>#{prefix}svg * {{", text, count=1)
