"""What identifies a run's configuration: one record for resume, `compare` and `history`.

Every property is declared once, in `PROPERTIES`, with its label and its kind:

- `setup`: the machine, the model, how the server was started and the lessons' own options.
  Two runs with the same setup measured the same thing; `history` groups runs by it and draws
  a line only between runs of one setup.
- `software`: what one upgrades between such runs (engine and its build, packages, OS, Python,
  bytesup's commit, the repetitions). A change here is what `history` names when a figure moved.
- `detail`: the memory the OS reports, which moves by a few hundred kB between boots of one
  machine: `compare` shows it, but it neither splits a group nor explains a move.

`resume` marks the properties a resumed run must share with the lessons already in its folder.
A difference is worded one way everywhere: the label, then each side's value (`value_text`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from bytesup.llama import process
from bytesup.llama import topology
from bytesup.store.manifest import Manifest
from bytesup.store.results import LessonResult

NOT_SET = "(not set)"


@dataclass(frozen=True)
class Property:
    key: str
    label: str
    kind: str  # "setup" | "software" | "detail"
    resume: bool = False


PROPERTIES: tuple[Property, ...] = (
    Property("host", "host", "setup", resume=True),
    Property("cpu", "CPU", "setup", resume=True),
    Property("cores", "cores", "setup"),
    Property("memory_bytes", "memory", "detail"),
    Property("gpus", "GPUs", "setup"),
    Property("os", "OS", "software"),
    Property("python", "python", "software"),
    Property("engine", "engine", "software", resume=True),
    Property("engine_build", "engine build", "software", resume=True),
    Property("engine_variant", "engine variant", "software", resume=True),
    Property("build_info", "server build_info", "software"),
    Property("commit", "repository commit", "software"),
    Property("dirty", "repository dirty", "software"),
    Property("topology", "topology", "setup"),
    Property("model_file", "model file", "setup", resume=True),
    Property("model_size_bytes", "model size (bytes)", "setup", resume=True),
    Property("model_sha256", "model sha256", "setup", resume=True),
)
# Properties with one entry per name: a server flag, a package, a lesson option.
FLAG, PACKAGE, OPTION, REPEAT = "flag ", "package ", "--", "--repeat"


def value_text(value: Any) -> str:
    """A property's value as the differences show it; a missing one is '(not set)'."""
    if value is None:
        return NOT_SET
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


class Difference(NamedTuple):
    """One property that differs: its label and the value on each side (None: not recorded or not set)."""

    label: str
    a: Any
    b: Any

    def sentence(self, a_side: str = "in A", b_side: str = "in B") -> str:
        return f"{self.label}: {value_text(self.a)} {a_side}, {value_text(self.b)} {b_side}"


def model_facts(manifest: Manifest, results: Iterable[LessonResult] = ()) -> dict[str, Any]:
    """file, size_bytes, sha256 (and name) of the served model: from the manifest, else from a lesson."""
    mdl = manifest.model
    ident: dict[str, Any] = {}
    if mdl.path:
        ident["file"] = Path(mdl.path).name
    if mdl.size_bytes is not None:
        ident["size_bytes"] = mdl.size_bytes
    if mdl.sha256 is not None:
        ident["sha256"] = mdl.sha256
    for result in results:
        for key in ("file", "size_bytes", "sha256", "name"):
            if ident.get(key) is None and result.model.get(key) is not None:
                ident[key] = result.model[key]
    return ident


@dataclass(frozen=True)
class RunIdentity:
    """A run's configuration, flat: fixed properties, then server flags, packages and options."""

    values: dict[str, Any]
    flags: dict[str, Any] = field(default_factory=dict)
    packages: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] | None = None  # None: the manifest predates recorded options
    repeat: Any = None

    @classmethod
    def of(cls, manifest: Manifest, results: Iterable[LessonResult] = ()) -> "RunIdentity":
        """From a manifest; a lesson result fills what an older manifest did not record."""
        results = list(results)
        host, eng, repo = manifest.host, manifest.engine, manifest.repository
        server = results[0].server if results else {}
        model = model_facts(manifest, results)
        values: dict[str, Any] = {
            "host": host.hostname,
            "cpu": host.cpu,
            "cores": host.cores,
            "memory_bytes": host.memory_bytes,
            "gpus": ", ".join(host.gpus or []) or ("none" if host else None),
            "os": host.os,
            "python": host.python,
            "engine": eng.engine or server.get("engine"),
            "engine_build": eng.build or server.get("build"),
            "engine_variant": process.build_variant(eng.model_dump(exclude_defaults=True)),
            "build_info": eng.build_info,
            "commit": repo.commit,
            "dirty": repo.dirty,
            # A server whose layers were split across rpc-servers.
            "topology": topology.describe(eng.topology) if eng.topology is not None else None,
            "model_file": model.get("file"),
            "model_size_bytes": model.get("size_bytes"),
            "model_sha256": model.get("sha256"),
        }
        raw_flags = eng.flags if eng.flags is not None else server.get("flags")
        flags = {name: "(set)" if value is None else value for name, value in sorted((raw_flags or {}).items())
                 if name not in process.FLAGS_NOT_MEASURED}
        packages = dict(sorted(manifest.packages.items()))
        opts = manifest.options
        options = None
        if opts is not None:
            options = {f"--{name.replace('_', '-')}": value for name, value in sorted((opts.lesson_options or {}).items())}
        return cls(values, flags, packages, options, opts.repeat if opts is not None else None)

    def entries(self, kind: str | None = None, resume: bool = False) -> dict[str, Any]:
        """{label: value} in a fixed order; `kind` keeps one kind, `resume` only what a resume checks."""
        out: dict[str, Any] = {}
        for p in PROPERTIES:
            if (kind is None or p.kind == kind) and (not resume or p.resume):
                out[p.label] = self.values.get(p.key)
        if kind in (None, "setup"):
            out.update({f"{FLAG}{k}": v for k, v in self.flags.items()})
        if kind in (None, "software") and not resume:
            out.update({f"{PACKAGE}{k}": v for k, v in self.packages.items()})
        if kind in (None, "software"):
            out[REPEAT] = self.repeat
        if kind in (None, "setup"):
            out.update(self.options or {})
        return out

    def setup_key(self) -> tuple[tuple[str, str], ...]:
        """What `history` groups by: every setup property, hashable."""
        return tuple((k, value_text(v)) for k, v in self.entries("setup").items())


def differences(a: RunIdentity, b: RunIdentity, kind: str | None = None, resume: bool = False,
                skip: Callable[[str, Any, Any], bool] | None = None) -> list[Difference]:
    """Every property whose value differs, in the order of `PROPERTIES`, then flags, packages, options.
    A flag set on one side only is a difference ('(not set)' on the other)."""
    ea, eb = a.entries(kind, resume), b.entries(kind, resume)
    out = []
    for label in list(ea) + [k for k in eb if k not in ea]:
        va, vb = ea.get(label), eb.get(label)
        if skip is not None and skip(label, va, vb):
            continue
        if va != vb:
            out.append(Difference(label, va, vb))
    return out


def resume_differences(folder: Manifest, now: Manifest) -> list[Difference]:
    """The folder's manifest against this run's facts, for what a resume checks. A fact the folder
    did not record (None, or an older manifest without options) is not a difference; a flag is."""
    old, new = RunIdentity.of(folder), RunIdentity.of(now)
    recorded_options = folder.options is not None

    def unrecorded(label: str, was: Any, _now: Any) -> bool:
        if label.startswith(OPTION) and not recorded_options:
            return True
        return not label.startswith(FLAG) and was is None

    return differences(old, new, resume=True, skip=unrecorded)
