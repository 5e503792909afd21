"""`bytesup compare RUN_A RUN_B`: what changed between two run folders.

Measurements are joined on their identity inside a lesson (name, settings, unit); the model
is a property of the whole run, so a different model makes every row "not comparable".
Each row gets A, B, B ÷ A and a verdict:

- better / worse: the change is beyond the threshold and the samples' [min, max] ranges do not
  overlap; the direction comes from `higher_is_better`. The ranges are those of the samples that
  are not outliers by the one rule (bytesup.course.robust): an outlier is named in the row's
  reason and kept in the JSON, but cannot widen a range into "within noise";
- within noise: the ranges overlap, or the change is under the threshold;
- same / changed: for facts (`higher_is_better` is None), e.g. a byte count;
- not comparable: a different model, or the same measurement with other settings or units.

Next-token tables (lesson 4's fact `top_tokens`, which an older run's `top8_*` tables became when it was loaded) are
compared token by token: did the set or the order of the top
tokens change, the largest |Δ logprob| over tokens present in both, the top token's probability.

Run folders are read by `runs.load_run`; `Run` and `load_run` stay importable from here.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from bytesup.course import robust
from bytesup.llama import topology
from bytesup.errors import BytesupError, RunFolderError
from bytesup.store.escape import md_text
from bytesup.store.escape import rich_text
from bytesup.store.identity import Difference, RunIdentity, differences, value_text
from bytesup.store.render import fmt, measurement_label
from bytesup.store.facts import FactShapeError, lesson04
from bytesup.store.facts.lesson04 import ShownTable
from bytesup.store.results import LessonResult, Measurement, Table
from bytesup.store.runs import Run, load_run

__all__ = ["Run", "load_run", "compare_runs", "Comparison", "parse_threshold", "markdown", "summary_line", "print_rich",
           "column_index", "token_text", "top_tokens"]

DEFAULT_THRESHOLD = 0.05


# --- identities: what differs between two runs -------------------------------------------

def run_identity(run: Run) -> RunIdentity:
    """The run's configuration (host, engine, model, flags…): `identity.RunIdentity`, one for every reader."""
    return RunIdentity.of(run.manifest, run.results.values())


def identity_differences(a: Run, b: Run) -> list[Difference]:
    """Every property of the two runs' identities that differs, setup and software alike."""
    return differences(run_identity(a), run_identity(b))


# --- measurements --------------------------------------------------------------------------

@dataclass
class Row:
    lesson: str
    name: str
    settings: dict[str, Any]
    unit: str
    a: Measurement | None
    b: Measurement | None
    ratio: float | None
    verdict: str
    reason: str = ""

    @property
    def label(self) -> str:
        return measurement_label(self.name, self.settings)

    def to_json(self) -> dict[str, Any]:
        def stats(m: Measurement | None):
            if m is None:
                return None
            return {"median": m.median, "min": m.min, "max": m.max, "samples": m.samples, "unit": m.unit, "settings": m.settings}
        return {"lesson": self.lesson, "name": self.name, "settings": self.settings, "unit": self.unit,
                "a": stats(self.a), "b": stats(self.b), "ratio": self.ratio, "verdict": self.verdict, "reason": self.reason}


def parse_threshold(text: str | float) -> float:
    """'10%' or '10' -> 0.10 (a percentage, the sign ignored)."""
    s = str(text).strip().rstrip("%").strip()
    try:
        value = abs(float(s))
    except ValueError:
        raise BytesupError(f"--threshold {text!r} is not a percentage. Write it like 5% or 10%.") from None
    if not math.isfinite(value):
        raise BytesupError(f"--threshold {text!r} is not a finite percentage. Write it like 5% or 10%.")
    return value / 100.0


def _settings_key(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def _short(value: Any) -> str:
    text = fmt(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _settings_diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    fa, fb = _flatten(a), _flatten(b)
    parts = []
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k) != fb.get(k):
            parts.append(f"{k} {_short(fa[k]) if k in fa else '(not set)'} vs {_short(fb[k]) if k in fb else '(not set)'}")
    return ", ".join(parts)


def judged_range(m: Measurement) -> tuple[float, float, robust.Robust | None]:
    """(low, high, judgement): the range of the samples that are not outliers by the one rule
    (bytesup.course.robust), or the measurement's own min and max without samples to judge."""
    if not m.samples:
        return m.min, m.max, None
    r = robust.judge(m.samples)
    return r.low, r.high, r


def ranges_overlap(a: Measurement, b: Measurement) -> bool:
    """The two ranges overlap, outliers left out: one slow sample cannot make a change look like noise."""
    a_low, a_high, _ = judged_range(a)
    b_low, b_high, _ = judged_range(b)
    return a_low <= b_high and b_low <= a_high


def outliers_text(a: Measurement | None, b: Measurement | None) -> str:
    """'' or which samples of A and B the rule set aside, e.g. 'outliers: B 7.4 (1 of 6)'."""
    parts = []
    for side, m in (("A", a), ("B", b)):
        r = None if m is None else judged_range(m)[2]
        if r is not None and r.outliers:
            parts.append(f"{side} {', '.join(f'{v:.4g}' for v in r.outlier_values)} ({len(r.outliers)} of {len(r.samples)})")
    return f"outliers, shown but not used: {'; '.join(parts)}" if parts else ""


def ratio_of(a: Measurement, b: Measurement) -> float | None:
    if a.median == 0 or not all(math.isfinite(x) for x in (a.median, b.median)):
        return None
    return b.median / a.median


def verdict(a: Measurement, b: Measurement, threshold: float) -> tuple[str, str]:
    """(verdict, reason) for two comparable measurements."""
    missing = [side for side, m in (("A", a), ("B", b)) if not math.isfinite(m.median)]
    if missing:
        return "not comparable", f"no finite value in {' and '.join(missing)}"
    ratio = ratio_of(a, b)
    higher = a.higher_is_better if a.higher_is_better is not None else b.higher_is_better
    if a.samples == b.samples or (a.median == b.median and a.min == b.min and a.max == b.max):
        return "same", ""
    change = None if ratio is None else ratio - 1.0
    if ranges_overlap(a, b):
        return "within noise", "the [min, max] ranges overlap, outliers left out"
    if change is not None and abs(change) < threshold:
        return "within noise", f"change {change:+.1%} is under the {threshold:.0%} threshold"
    if higher is None:
        return "changed", "" if change is None else f"change {change:+.1%}"
    if change is None:
        better = (b.median > a.median) == higher
    else:
        better = (change > 0) == higher
    return ("better" if better else "worse"), ("" if change is None else f"change {change:+.1%}")


def _model_label(run: Run) -> str:
    m = run.model_identity()
    return str(m.get("file") or m.get("name") or "unknown model")


def models_differ(a: Run, b: Run) -> str:
    """'' when the runs served the same model, else a phrase naming both."""
    ma, mb = a.model_identity(), b.model_identity()
    if ma.get("sha256") and mb.get("sha256"):
        same = ma["sha256"] == mb["sha256"]
    else:
        same = (ma.get("file"), ma.get("size_bytes")) == (mb.get("file"), mb.get("size_bytes"))
    if same:
        return ""
    la, lb = _model_label(a), _model_label(b)
    if la == lb:
        return f"different model: {la} with sha256 {str(ma.get('sha256'))[:12]}… vs {str(mb.get('sha256'))[:12]}…"
    return f"different model: {la} vs {lb}"


def compare_measurements(lesson: str, ra: LessonResult, rb: LessonResult, threshold: float, model_diff: str) -> list[Row]:
    rows: list[Row] = []
    names = list(dict.fromkeys([m.name for m in ra.measurements] + [m.name for m in rb.measurements]))
    for name in names:
        ma = [m for m in ra.measurements if m.name == name]
        mb = [m for m in rb.measurements if m.name == name]
        unmatched_b = list(mb)
        pairs: list[tuple[Measurement, Measurement]] = []
        leftover_a = []
        for m in ma:
            twin = next((x for x in unmatched_b if _settings_key(x.settings) == _settings_key(m.settings) and x.unit == m.unit), None)
            if twin is None:
                leftover_a.append(m)
            else:
                unmatched_b.remove(twin)
                pairs.append((m, twin))
        for m, twin in pairs:
            ratio = ratio_of(m, twin)
            if model_diff:
                rows.append(Row(lesson, name, m.settings, m.unit, m, twin, ratio, "not comparable", model_diff))
            else:
                v, why = verdict(m, twin, threshold)
                why = "; ".join(t for t in (why, outliers_text(m, twin)) if t)
                rows.append(Row(lesson, name, m.settings, m.unit, m, twin, ratio, v, why))
        # Same name, other settings or unit: pair them one to one when that is unambiguous.
        if len(leftover_a) == 1 and len(unmatched_b) == 1:
            m, twin = leftover_a[0], unmatched_b[0]
            whys = []
            if m.unit != twin.unit:
                whys.append(f"units differ: {m.unit or '(none)'} vs {twin.unit or '(none)'}")
            if _settings_key(m.settings) != _settings_key(twin.settings):
                whys.append(f"settings differ: {_settings_diff(m.settings, twin.settings)}")
            if model_diff:
                whys.insert(0, model_diff)
            rows.append(Row(lesson, name, m.settings, m.unit, m, twin, ratio_of(m, twin), "not comparable", "; ".join(whys)))
        else:
            for m in leftover_a:
                rows.append(Row(lesson, name, m.settings, m.unit, m, None, None, "not comparable", "only in A"))
            for m in unmatched_b:
                rows.append(Row(lesson, name, m.settings, m.unit, None, m, None, "not comparable", "only in B"))
    return rows


# --- next-token tables -----------------------------------------------------------------------

def column_index(table: Table, *names: str) -> int | None:
    lowered = [c.name.strip().lower() for c in table.columns]
    for name in names:
        if name in lowered:
            return lowered.index(name)
    return None


def token_text(value: Any) -> str:
    """A token cell back to its text: lessons store repr()-style quoted strings such as "' Paris'"."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        try:
            parsed = ast.literal_eval(value)
            if isinstance(parsed, (str, bytes)):
                return parsed if isinstance(parsed, str) else repr(parsed)
        except (ValueError, SyntaxError):
            pass
    return str(value)


@dataclass
class TopTokens:
    tokens: list[str]
    logprobs: list[float | None]
    probabilities: list[float | None]  # fractions of 1


def top_tokens(table: ShownTable) -> TopTokens:
    """The ranked tokens of one next-token table of lesson 4's fact top_tokens; a probability the lesson did
    not show is e^logprob."""
    rows = table.ranked()
    probs = [t.probability if t.probability is not None else (math.exp(t.logprob) if t.logprob is not None else None)
             for t in rows]
    return TopTokens([token_text(t.token) for t in rows], [t.logprob for t in rows], probs)


@dataclass
class TableRow:
    lesson: str
    table: str
    title: str
    change: str
    max_abs_dlogprob: float | None
    max_token: str | None
    top_a: tuple[str, float | None] | None
    top_b: tuple[str, float | None] | None
    verdict: str
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"lesson": self.lesson, "table": self.table, "title": self.title, "change": self.change,
                "max_abs_delta_logprob": self.max_abs_dlogprob, "max_delta_token": self.max_token,
                "top_a": list(self.top_a) if self.top_a else None, "top_b": list(self.top_b) if self.top_b else None,
                "verdict": self.verdict, "reason": self.reason}


LOGPROB_SAME = 1e-6


def compare_token_table(lesson: str, name: str, title: str, ta: ShownTable, tb: ShownTable, model_diff: str) -> TableRow:
    xa, xb = top_tokens(ta), top_tokens(tb)
    if xa.tokens == xb.tokens:
        change = "same tokens, same order"
    elif set(xa.tokens) == set(xb.tokens):
        change = "same tokens, order changed"
    else:
        gone = [t for t in xa.tokens if t not in xb.tokens]
        new = [t for t in xb.tokens if t not in xa.tokens]
        change = f"set changed: −{', '.join(map(repr, gone))}; +{', '.join(map(repr, new))}"
    best, best_tok = None, None
    for tok, lp in zip(xa.tokens, xa.logprobs, strict=True):
        if tok in xb.tokens and lp is not None:
            other = xb.logprobs[xb.tokens.index(tok)]
            if other is not None and (best is None or abs(other - lp) > best):
                best, best_tok = abs(other - lp), tok
    top_a = (xa.tokens[0], xa.probabilities[0]) if xa.tokens else None
    top_b = (xb.tokens[0], xb.probabilities[0]) if xb.tokens else None
    if model_diff:
        v, why = "not comparable", model_diff
    elif change == "same tokens, same order" and (best is None or best <= LOGPROB_SAME):
        v, why = "same", ""
    elif change == "same tokens, same order":
        v, why = "within noise" if best is not None and best < 0.01 else "changed", "logprobs moved"
    else:
        v, why = "changed", change
    return TableRow(lesson, name, title, change, best, best_tok, top_a, top_b, v, why)


def token_tables(result: LessonResult) -> dict[str, ShownTable]:
    """Lesson 4's next-token tables by name, from its fact top_tokens ({} for another lesson, or a fact of another shape)."""
    try:
        fact = result.stated(lesson04.TopTokens)
    except FactShapeError:
        return {}
    return fact.tables() if fact is not None else {}


# --- the comparison ---------------------------------------------------------------------------

@dataclass
class Comparison:
    a: Run
    b: Run
    threshold: float
    identity: list[Difference]
    rows: list[Row]
    tables: list[TableRow]
    only_a: list[str]
    only_b: list[str]
    lesson_notes: list[str]
    model_diff: str

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "worse"]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.rows:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        return counts

    def missing_paragraph(self) -> str:
        parts = []
        if self.only_a:
            parts.append(f"only in A ({self.a.path}): {', '.join(self.only_a)}")
        if self.only_b:
            parts.append(f"only in B ({self.b.path}): {', '.join(self.only_b)}")
        if not parts:
            return ""
        return ("Some lessons are in one run only, so they are not compared: " + "; ".join(parts) +
                ". Run the missing lessons into that folder (`bytesup run LESSON --out RUN --resume`) to compare them.")

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1, "kind": "bytesup-compare",
            "a": str(self.a.path), "b": str(self.b.path), "threshold": self.threshold,
            "differences": [{"what": k, "a": va, "b": vb} for k, va, vb in self.identity],
            "model_difference": self.model_diff or None,
            "lessons_only_in_a": self.only_a, "lessons_only_in_b": self.only_b,
            "lesson_notes": self.lesson_notes,
            "measurements": [r.to_json() for r in self.rows],
            "token_tables": [t.to_json() for t in self.tables],
            "counts": self.counts(),
            "regressions": len(self.regressions),
        }


def compare_runs(a: Run, b: Run, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    common = [lid for lid in a.results if lid in b.results]
    only_a = [lid for lid in a.results if lid not in b.results]
    only_b = [lid for lid in b.results if lid not in a.results]
    if not common:
        raise RunFolderError(
            f"The two runs have no lesson in common, so there is nothing to compare: "
            f"A ({a.path}) holds {', '.join(a.results) or 'no lesson results'}; "
            f"B ({b.path}) holds {', '.join(b.results) or 'no lesson results'}. "
            "Run the same lessons into both folders first."
        )
    # Another topology (one process vs rpc-servers, or another split) is another setup: not comparable, never a regression.
    model_diff = models_differ(a, b) or topology.differs(a.manifest.engine.topology, b.manifest.engine.topology)
    rows: list[Row] = []
    tables: list[TableRow] = []
    notes: list[str] = []
    for lid in common:
        ra, rb = a.results[lid], b.results[lid]
        if ra.settings != rb.settings:
            notes.append(f"{lid}: lesson settings differ ({_settings_diff(ra.settings, rb.settings)})")
        rows.extend(compare_measurements(lid, ra, rb, threshold, model_diff))
        titles = {t.name: t.title for t in ra.tables}
        theirs = token_tables(rb)
        for name, ta in token_tables(ra).items():
            if name in theirs:
                tables.append(compare_token_table(lid, name, titles.get(name, name), ta, theirs[name], model_diff))
    return Comparison(a, b, threshold, identity_differences(a, b), rows, tables, only_a, only_b, notes, model_diff)


# --- rendering ----------------------------------------------------------------------------------

def _ratio_text(r: float | None) -> str:
    return "—" if r is None else f"{r:.3f}×"


def measure_text(m: Measurement | None) -> str:
    """The median, with the samples' min–max in brackets when they differ."""
    if m is None:
        return "—"
    if m.min == m.max:
        return fmt(m.median)
    return f"{fmt(m.median)} ({fmt(m.min)}–{fmt(m.max)})"


def _prob_text(top: tuple[str, float | None] | None) -> str:
    if top is None:
        return "—"
    tok, p = top
    return f"{tok!r} {'—' if p is None else f'{100 * p:.4g}%'}"


def _md_cell(text: Any) -> str:
    return md_text(text, newline="⏎", cell=True)


def markdown(c: Comparison) -> str:
    lines = [f"# bytesup compare: {c.a.name} → {c.b.name}", "",
             (f"A: `{c.a.path}` · B: `{c.b.path}` · threshold {c.threshold:.0%} · B ÷ A of the medians "
              "(min–max of the samples in brackets)"), ""]
    if c.identity:
        lines += ["## What differs between the runs", "", "| | A | B |", "|---|---|---|"]
        lines += [f"| {_md_cell(k)} | {_md_cell(value_text(va))} | {_md_cell(value_text(vb))} |" for k, va, vb in c.identity]
        lines.append("")
    else:
        lines += ["The two runs share host, engine, flags, packages and model.", ""]
    if c.missing_paragraph():
        lines += [c.missing_paragraph(), ""]
    if c.lesson_notes:
        lines += [f"- {n}" for n in c.lesson_notes] + [""]
    if load_line(c):
        lines += [load_line(c), ""]
    lines += ["## Measurements", "", "| lesson | measurement | unit | A | B | B ÷ A | verdict |", "|---|---|---|---|---|---|---|"]
    for r in c.rows:
        v = r.verdict + (f" ({r.reason})" if r.reason else "")
        lines.append(f"| {r.lesson} | {_md_cell(r.label)} | {_md_cell(r.unit)} | {_md_cell(measure_text(r.a))} | "
                     f"{_md_cell(measure_text(r.b))} | {_ratio_text(r.ratio)} | {_md_cell(v)} |")
    lines.append("")
    if c.tables:
        lines += ["## Next-token tables", "", "| lesson | table | top tokens | max \\|Δ logprob\\| | top token A | top token B | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for t in c.tables:
            lines.append(f"| {t.lesson} | {_md_cell(t.table)} | {_md_cell(t.change)} | {_md_cell(_delta_text(t))} | "
                         f"{_md_cell(_prob_text(t.top_a))} | {_md_cell(_prob_text(t.top_b))} | {_md_cell(t.verdict)} |")
        lines.append("")
    lines.append(summary_line(c))
    return "\n".join(lines) + "\n"


def summary_line(c: Comparison) -> str:
    counts = c.counts()
    order = ["better", "worse", "within noise", "same", "changed", "not comparable"]
    parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
    return f"{len(c.rows)} measurements compared: " + (", ".join(parts) if parts else "none") + "."


VERDICT_STYLE = {"better": "green", "worse": "bold red", "within noise": "dim", "same": "dim",
                 "changed": "yellow", "not comparable": "magenta"}


def _delta_text(t: TableRow) -> str:
    if t.max_abs_dlogprob is None:
        return "—"
    if t.max_abs_dlogprob == 0:
        return "0"
    return f"{t.max_abs_dlogprob:.4g} ({t.max_token!r})"


def load_line(c: Comparison) -> str:
    """The machines' load while each run was made: context for reading noise, not an identity."""
    la, lb = c.a.manifest.load_average_before, c.b.manifest.load_average_before
    if la is None and lb is None:
        return ""
    return f"Load average (1, 5, 15 min) before the run: A {fmt(la)} · B {fmt(lb)}."


def print_rich(c: Comparison, console: Console) -> None:
    console.print(f"[bold]A[/bold] {rich_text(str(c.a.path))}\n[bold]B[/bold] {rich_text(str(c.b.path))}", highlight=False)
    if c.identity:
        t = RichTable(title="what differs between the runs", title_justify="left")
        t.add_column("")
        t.add_column("A")
        t.add_column("B")
        for k, va, vb in c.identity:
            t.add_row(rich_text(k), rich_text(value_text(va)), rich_text(value_text(vb)))
        console.print(t)
    else:
        console.print("The two runs share host, engine, flags, packages and model.")
    if c.missing_paragraph():
        console.print(f"[yellow]{rich_text(c.missing_paragraph())}[/yellow]", highlight=False)
    for n in c.lesson_notes:
        console.print(f"[yellow]{rich_text(n)}[/yellow]", highlight=False)
    if load_line(c):
        console.print(load_line(c), highlight=False)
    t = RichTable(title=f"measurements (threshold {c.threshold:.0%}; median, min–max in brackets)", title_justify="left")
    for col in ("lesson", "measurement", "unit", "A", "B", "B ÷ A", "verdict"):
        t.add_column(col, justify="right" if col in ("A", "B", "B ÷ A") else "left")
    for r in c.rows:
        style = VERDICT_STYLE.get(r.verdict, "")
        v = f"[{style}]{r.verdict}[/{style}]" + (rich_text(f" ({r.reason})") if r.reason else "")
        t.add_row(r.lesson, rich_text(r.label), rich_text(r.unit), measure_text(r.a), measure_text(r.b), _ratio_text(r.ratio), v)
    console.print(t)
    if c.tables:
        t = RichTable(title="next-token tables", title_justify="left")
        for col in ("lesson", "table", "top tokens", "max |Δ logprob|", "top token A", "top token B", "verdict"):
            t.add_column(col)
        for x in c.tables:
            style = VERDICT_STYLE.get(x.verdict, "")
            t.add_row(x.lesson, rich_text(x.table), rich_text(x.change), rich_text(_delta_text(x)), rich_text(_prob_text(x.top_a)),
                      rich_text(_prob_text(x.top_b)),
                      f"[{style}]{x.verdict}[/{style}]" + (rich_text(f" ({x.reason})") if x.reason and x.reason != x.change else ""))
        console.print(t)
    console.print(summary_line(c))
