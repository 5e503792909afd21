"""Draw a lesson's plots (PNG and SVG) from the plot records in its JSON."""

from __future__ import annotations

import io
from pathlib import Path

from bytesup.store.render import plot_files
from bytesup.store.results import LessonResult, Plot
from bytesup.files import write_bytes_atomic


def _figure(plot: Plot):
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


def write_plots(result: LessonResult, run_dir: Path) -> list[Path]:
    written = []
    for plot in result.plots:
        fig, plt = _figure(plot)
        for rel, fmt, meta in zip(plot_files(result, plot.name), ("png", "svg"), ({"Software": None}, {"Date": None}), strict=True):
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, metadata=meta)
            write_bytes_atomic(run_dir / rel, buf.getvalue())
            written.append(run_dir / rel)
        plt.close(fig)
    return written


def svg_markup(plot: Plot) -> str:
    """The plot as an <svg> element to put inside an HTML page (the XML prolog and doctype dropped)."""
    fig, plt = _figure(plot)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]
