"""The server a run talks to: its URL checked, one started for the run when none answers, probed
once (/health, /props, /v1/models) for the facts the manifest records, and --model checked against it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from bytesup.llama import process
from bytesup.models import catalog
from bytesup.errors import BytesupError, ServerHTTPError, ServerUnreachable, redact_url
from bytesup.course.formulas import batch_sizes
from bytesup.models.gguf import GGUFError, check_gguf, is_gguf, read_model_info
from bytesup.options import RunOptions
from bytesup.llama.placement import is_loopback


def _as_url_host(rest: str) -> str:
    """host:port as a URL writes it: an IPv6 address (more than one colon, no brackets) goes in brackets."""
    if rest.count(":") < 2 or rest.startswith("["):
        return rest
    host, _, port = rest.rpartition(":")
    return f"[{host}]:{port}" if port.isdigit() and host else f"[{rest}]"


def check_server_url(url: str) -> None:
    if not re.match(r"^https?://[^/]", url):
        raise BytesupError(
            f"The server address {url!r} is not a URL: it needs a scheme, as in "
            f"`--server http://{_as_url_host(url.split('://')[-1]) or '127.0.0.1:8099'}` (or set BYTESUP_SERVER the same way)."
        )
    try:
        _ = httpx.URL(url).port
    except httpx.InvalidURL as exc:
        scheme, _, rest = url.partition("://")
        host_port = rest.split("/", 1)[0]
        raise BytesupError(
            f"The server address {url!r} is not a valid URL ({exc}). An IPv6 address goes in brackets: "
            f"`--server {scheme}://{_as_url_host(host_port)}`."
        ) from None


# HTTP statuses of a server that has no /v1/models at all (an older or smaller build): the run goes on without it.
NO_SUCH_ENDPOINT = (404, 501)


class ModelsUnanswered(BytesupError):
    """/v1/models failed on a server that answered /health and /props: the run cannot say what the server serves."""

    def __init__(self, url: str, cause: BytesupError):
        super().__init__(
            f"The server at {redact_url(url)} answered /health and /props, but not /v1/models: {cause} The run reads "
            "the served model's parameters and size there, to record them, to check --model against them and to "
            "notice a server swapped during the run, so it stops before its first lesson. Read the server's log and "
            "restart it, or point --server at a llama-server that answers /v1/models.")


def probe(url: str, options: RunOptions) -> tuple[dict[str, Any], dict | None]:
    """/health, then /props and /v1/models as JSON: None where the server has no /v1/models (it answers 404 or
    501); any other failure of /v1/models is a ModelsUnanswered, never a silent None."""
    with options.client(url) as client:
        client.health()
        props = client.props().model_dump(mode="json")
        try:
            served: dict | None = client.models().model_dump(mode="json")
        except ServerHTTPError as exc:
            if exc.status not in NO_SUCH_ENDPOINT:
                raise ModelsUnanswered(url, exc) from None
            served = None
        except BytesupError as exc:
            raise ModelsUnanswered(url, exc) from None
    return props, served


class ServerChanged(BytesupError):
    """The server answering the run's URL is no longer the one the run started with."""


def served_identity(props: dict[str, Any], models: dict | None) -> dict[str, Any]:
    """What must stay the same for every lesson of a run to measure one thing: the model the server
    serves (its path, type, parameters and tensor bytes), its build, its context and its slots."""
    data = (models or {}).get("data") or []
    meta = (data[0].get("meta") if data and isinstance(data[0], dict) else None) or {}
    settings = props.get("default_generation_settings") or {}
    return {"model path": props.get("model_path"), "model type": props.get("model_ftype"),
            "model parameters": meta.get("n_params"), "model tensor bytes": meta.get("size"),
            "build": props.get("build_info"), "context": settings.get("n_ctx") if isinstance(settings, dict) else None,
            "slots": props.get("total_slots")}


def confirm_same_server(url: str, options: RunOptions, props: dict[str, Any], models: dict | None, lesson_id: str) -> None:
    """Probe the server again (nothing is recorded) and stop the run when it serves something else than at the
    start: another model, build or setting, as when a server was swapped or restarted on the same port."""
    now_props, now_models = probe(url, options)
    before, now = served_identity(props, models), served_identity(now_props, now_models)
    diffs = [f"{name} was {before[name]!r}, now {now[name]!r}" for name in before if before[name] != now[name]]
    if diffs:
        raise ServerChanged(
            f"The server at {redact_url(url)} changed during the run, at {lesson_id}: {'; '.join(diffs)}. Nothing of "
            f"{lesson_id} was saved, and the lessons saved before are kept. Serve the run's model again and resume "
            "the run (the command is printed below), or start a new run with --out DIR against the new server.")


def check_model_matches(model: Path, models: dict | None) -> None:
    """--model must be the file the server serves: same parameter count and tensor bytes as the
    served model's `meta` in /v1/models (where the server lists them)."""
    data = (models or {}).get("data") or []
    meta = (data[0].get("meta") if data and isinstance(data[0], dict) else None) or {}
    served_params, served_bytes = meta.get("n_params"), meta.get("size")
    if served_params is None and served_bytes is None:
        return
    info = read_model_info(model)
    mine = {"parameters": info["n_params"], "tensor bytes": info["tensor_bytes"]}
    served = {"parameters": served_params, "tensor bytes": served_bytes}
    diffs = [f"{k} {mine[k]:,} here, {served[k]:,} served" for k in mine if served[k] is not None and served[k] != mine[k]]
    if diffs:
        raise BytesupError(
            f"--model {model} is not the model the server serves ({data[0].get('id', '?')}): {'; '.join(diffs)}. "
            "The lessons would mix numbers of two models. Pass the GGUF the server runs, leave --model out "
            "to use the file the server reports, or go on anyway with --model-mismatch-ok."
        )


def engine_facts(url: str, props: dict, models: dict | None) -> dict:
    try:
        port = urlparse(url).port  # also of http://[::1]:8404
    except ValueError:
        port = None
    info = process.read_engine_info(port) if port and is_loopback(urlparse(url).hostname or "") else None
    facts = dict(info) if info else observed_engine(props)
    facts.update({"url": redact_url(url), "props": props, "v1_models": models})
    # Prefill reads the weights once per micro-batch: what n_batch and n_ubatch the server runs with.
    facts["batching"] = batch_sizes(facts.get("flags"))
    return facts


def observed_engine(props: dict) -> dict:
    """What /props tells of a server started outside bytesup; flags it does not show stay unknown."""
    build = props.get("build_info")
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    slots = props.get("total_slots")
    flags = {}
    if n_ctx and slots:
        flags = {"--ctx-size": str(int(n_ctx) * int(slots)), "--parallel": str(slots)}
    return {"engine": "embedded" if build == "b0-unknown" else "llama-server", "started_by": "not bytesup",
            "build": build, "flags": flags, "flags_source": "observed in /props; other flags unknown"}


def model_path_from(props: dict, explicit: Path | None, console: Console | None = None) -> Path | None:
    """The GGUF the lessons read: --model, else the path the server reports in /props when it is a GGUF file
    here. A reported path is read only as a GGUF's header and tensor index (`check_gguf`), and used (hashed,
    sized, described) only once all of these parse and its tensor data is all there: a server never makes
    bytesup hash or show another file, and no byte of one is ever printed."""
    if explicit is not None:
        return explicit
    served = props.get("model_path")
    if not served or not isinstance(served, str) or not Path(served).is_file():
        return None
    whole = is_gguf(served)
    if whole:
        try:
            check_gguf(served)
        except GGUFError:
            whole = False
    if not whole:
        if console is not None:
            console.print(escape(
                f"The server reports model_path {served!r}, which is no GGUF file here; it was not read. Only a file "
                "whose whole header and tensor index parse as a GGUF's is hashed, sized or described. Name the model "
                "file explicitly with --model FILE.gguf."), highlight=False, soft_wrap=True)
        return None
    return Path(served)


MODEL_ENV = "BYTESUP_MODEL"


def server_given(options: RunOptions) -> bool:
    return bool(options.server_url or os.environ.get("BYTESUP_SERVER"))


def answers(url: str, options: RunOptions) -> bool:
    """False only when nothing listens at `url`. A server that answers, even with an error, is
    used as it is (the probe that follows reports what is wrong with it)."""
    with options.client(url) as probe:
        try:
            probe.health()
        except ServerUnreachable:
            return False
        except BytesupError:
            return True
    return True


def model_wanted(options: RunOptions) -> Path | str:
    """The GGUF a server started for the run loads, made or not: --model, else $BYTESUP_MODEL (a GGUF file, or a
    model's name, checked here), else the default model's name."""
    if options.model is not None:
        return options.model
    wanted = os.environ.get(MODEL_ENV)
    if wanted and Path(wanted).expanduser().is_file():
        return Path(wanted).expanduser()
    if wanted and wanted not in catalog.model_names():
        raise BytesupError(
            f"{MODEL_ENV}={wanted} is neither a GGUF file nor a model preset. Set it to a .gguf path or "
            "a preset from `bytesup model build --list`, or unset it to use the default model.")
    return wanted or catalog.DEFAULT_MODEL


def model_for_run(options: RunOptions, console: Console) -> Path:
    """The GGUF a server started for the run loads: --model, else $BYTESUP_MODEL (a GGUF file or a
    model preset), else the default model, built or fetched the first time it is needed."""
    if options.model is not None:
        return options.model
    wanted = os.environ.get(MODEL_ENV)
    if wanted and Path(wanted).expanduser().is_file():
        return Path(wanted).expanduser()
    name = wanted or catalog.DEFAULT_MODEL
    with _spinner(console, f"model {name}: building or fetching it (once; later runs reuse the file)"):
        try:
            return catalog.ensure_model(name)
        except OSError as exc:
            raise BytesupError(
                f"Could not build or fetch the model {name} for the run's own server ({exc.strerror or exc}"
                f"{f': {exc.filename}' if exc.filename else ''}). Nothing was left half-written. Set BYTESUP_MODELS "
                "(and BYTESUP_CACHE) to folders you can write to, or free some space, or pass --server URL."
            ) from None
        except KeyError:
            raise BytesupError(
                f"{MODEL_ENV}={wanted} is neither a GGUF file nor a model preset. Set it to a .gguf path or "
                "a preset from `bytesup model build --list`, or unset it to use the default model."
            ) from None


def start_run_server(url: str, options: RunOptions, console: Console, cleanup: contextlib.ExitStack,
                     model: Path | None = None) -> process.StartedServer:
    """Start a server for this run on a free port (so it never meets another run's or the user's), on `model`
    (made already), else on `model_for_run`'s; `cleanup` stops it and removes its state folder when the run ends,
    also on Ctrl-C or SIGTERM."""
    try:
        model = model or model_for_run(options, console)  # SIGTERM already raises like Ctrl-C here (signals_raise)
    except KeyboardInterrupt as exc:
        exc.add_note("while the model for the run's own server was being built or fetched")
        raise
    port = process.free_port()
    cleanup.callback(_stop_run_server, port)  # before starting: a start cut short is stopped too
    try:
        with _spinner(console, f"starting a server on {model.name}"):
            started = process.start_server(model, ["--port", str(port)], die_with_parent=True, answer_s=options.timeout)
    except KeyboardInterrupt as exc:
        # start_server stopped the half-started server (or, stopped before its own cleanup began, it is stopped by
        # its pid file here); the log of a start nobody waits for goes with its folder.
        process.stop_server(port)
        shutil.rmtree(process.state_dir_for(port), ignore_errors=True)
        exc.add_note(f"while the run's own server was starting on {model.name} (port {port}); it was stopped and "
                     f"its {process.state_dir_for(port).name}/ folder removed")
        raise
    why = "The run has its own server" if options.own_server else f"No server answers at {redact_url(url)}"
    console.print(escape(
        f"{why}: started {started.info['choice']['why']} "
        f"on {model.name} at {started.url} for this run; it stops when the run ends"
        + ("." if options.own_server else " (--no-start-server: stop with an error instead)."
    )), highlight=False, soft_wrap=True)
    return started


@contextlib.contextmanager
def _spinner(console: Console, text: str) -> Iterator[None]:
    """A spinner with the time spent, on a terminal only (elsewhere it would leave blank lines)."""
    if not console.is_terminal:
        yield
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True) as progress:
        progress.add_task(escape(text), total=None)
        yield


def _stop_run_server(port: int) -> None:
    # The folder (pid, log, engine.json) belonged to this run only; the manifest keeps the facts.
    # A server that failed to start has no pid file left: its log stays for the error to point at.
    if process.stop_server(port):
        shutil.rmtree(process.state_dir_for(port), ignore_errors=True)
