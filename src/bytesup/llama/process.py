"""Start and stop llama.cpp servers: the logic behind scripts/start_server.sh, scripts/stop_server.sh
and `bytesup server`.

Engine choice (`choose_engine`, the only one): $LLAMA_SERVER if set, else the cached native build of
scripts/build_llama_server.sh when it passed its smoke test on this CPU (see `build`), else
`llama-server` on PATH, else the embedded engine (`python -m bytesup.llama.embedded`, llama.cpp's server through
xllamacpp). BYTESUP_ENGINE=embedded takes the embedded engine unless LLAMA_SERVER is set. Each started
server gets a state folder `.run/server-<port>/` with its pid, its log and `engine.json` (engine, build,
flags, the choice and why, the native build's record), which the run manifest reads.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx

from bytesup.host.environment import utc_now
from bytesup.llama import build
from bytesup.llama import topology
from bytesup.errors import BytesupError, EngineUnavailable, ServerStartError
from bytesup.files import write_text_atomic
from bytesup.models.gguf import check_gguf
from bytesup.models.catalog import PRESETS, ensure_model
from bytesup.paths import server_state_dir
from bytesup.models.smollm2 import REAL_MODELS

# The course's server settings; flags given by the user replace these one by one.
DEFAULT_FLAGS = ["--host", "127.0.0.1", "--port", "8099", "-c", "2048", "-ngl", "99", "--parallel", "1", "--metrics"]

# llama-server spellings of the same option -> one canonical name; None: the option takes no value.
_ALIASES = {
    "-m": "--model", "--model": "--model",
    "--host": "--host", "--port": "--port",
    "-c": "--ctx-size", "--ctx-size": "--ctx-size",
    "-ngl": "--n-gpu-layers", "--n-gpu-layers": "--n-gpu-layers", "--gpu-layers": "--n-gpu-layers",
    "-np": "--parallel", "--parallel": "--parallel",
    "-t": "--threads", "--threads": "--threads",
    "-tb": "--threads-batch", "--threads-batch": "--threads-batch",
    "-b": "--batch-size", "--batch-size": "--batch-size",
    "-ub": "--ubatch-size", "--ubatch-size": "--ubatch-size",
    "-cram": "--cache-ram", "--cache-ram": "--cache-ram",
    "--api-key": "--api-key",
    # Speculative decoding: llama-server's current spellings first, then its older aliases.
    "--spec-type": "--spec-type",
    "--spec-draft-model": "--spec-draft-model", "-md": "--spec-draft-model", "--model-draft": "--spec-draft-model",
    "--spec-draft-n-max": "--spec-draft-n-max", "--spec-draft-n-min": "--spec-draft-n-min",
    "--spec-draft-p-min": "--spec-draft-p-min", "--draft-p-min": "--spec-draft-p-min",
    "--spec-draft-threads": "--spec-draft-threads", "-td": "--spec-draft-threads", "--threads-draft": "--spec-draft-threads",
    "--spec-draft-threads-batch": "--spec-draft-threads-batch", "-tbd": "--spec-draft-threads-batch",
    "--threads-batch-draft": "--spec-draft-threads-batch",
    "--spec-draft-ngl": "--spec-draft-ngl", "-ngld": "--spec-draft-ngl", "--gpu-layers-draft": "--spec-draft-ngl",
    "--n-gpu-layers-draft": "--spec-draft-ngl",
    "--spec-ngram-simple-size-n": "--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m": "--spec-ngram-simple-size-m",
    "--spec-ngram-simple-min-hits": "--spec-ngram-simple-min-hits",
}
# The flags that make a server speculate (a lesson's own servers decide these for themselves).
# Server flags that change nothing a lesson measures (where the server listens, its model path, its key,
# its log file): neither a resume nor a comparison of two runs counts them as a different configuration.
FLAGS_NOT_MEASURED = frozenset({"--port", "--host", "--model", "-m", "--api-key", "--log-file"})
SPECULATIVE_FLAGS = frozenset(v for k, v in _ALIASES.items() if v.startswith("--spec-"))
_SWITCHES = {"--metrics", "--no-slots", "--no-warmup", "--slots", "--props"}
_SECRET_FLAGS = {"--api-key"}

STATE_FILE = "engine.json"

# How long the calls around a server's start wait for one answer, named once here. A run passes its --timeout as
# `answer_s` (start_server); these are the waits where no run gives one.
READY_POLL_S = 2.0  # one poll of /health while the server loads; it polls again until start_server's wait_s is over
# Between two polls of /health while a server loads, and of a stopped server's exit: a lesson waits half of each on
# average for every server it starts and stops. A make run starts about 26; at 0.25 and 0.1 s they cost it about
# 4.5 s, at these under 1 s.
READY_PAUSE_S = 0.05
EXIT_PAUSE_S = 0.02
PROPS_WAIT_S = 10.0  # /props once the server is ready (`bytesup server start`, the fixture scripts)
STATUS_WAIT_S = 5.0  # each answer of `bytesup server status`: a glance at a server, not a measurement


def parse_flags(argv: list[str]) -> dict[str, str | None]:
    """llama-server flags -> {canonical flag: value or None}. Unknown flags are kept as given."""
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if "=" in arg and arg.startswith("--"):
            name, value = arg.split("=", 1)
            flags[_ALIASES.get(name, name)] = value
        elif arg in _SWITCHES:
            flags[arg] = None
        elif arg in _ALIASES or (arg.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-")):
            if i + 1 >= len(argv):
                raise ServerStartError(f"The flag {arg} needs a value. Example: scripts/start_server.sh --port 8100")
            flags[_ALIASES.get(arg, arg)] = argv[i + 1]
            i += 1
        else:
            flags[arg] = None
        i += 1
    return flags


def merge_flags(user_argv: list[str]) -> dict[str, str | None]:
    merged = parse_flags(DEFAULT_FLAGS)
    merged.update(parse_flags(user_argv))
    return merged


def flags_to_argv(flags: dict[str, str | None]) -> list[str]:
    argv: list[str] = []
    for name, value in flags.items():
        argv.append(name)
        if value is not None:
            argv.append(value)
    return argv


def redacted(flags: dict[str, str | None]) -> dict[str, str | None]:
    return {k: ("***" if k in _SECRET_FLAGS and v else v) for k, v in flags.items()}


# "embedded": the embedded engine unless LLAMA_SERVER is set; "native": the native build; "fastest" (`make run`): the
# native build where it is cached and passed its smoke test on this CPU, else the embedded engine (PATH is passed over).
ENGINE_CHOICE = "BYTESUP_ENGINE"
REBUILD_HINT = ("To go on without it, unset LLAMA_SERVER and set BYTESUP_ENGINE=embedded (the embedded engine); to rebuild "
                "the native build for this machine, run `bash scripts/build_llama_server.sh --rebuild`.")


@dataclass(frozen=True)
class EngineChoice:
    """Which llama.cpp server is started, and one line saying why (with what was passed over)."""

    kind: str  # "llama-server" (a binary) or "embedded" (xllamacpp in `python -m bytesup.llama.embedded`)
    command: list[str]
    source: str  # "LLAMA_SERVER", "native build", "PATH" or "embedded"
    why: str
    native_build: dict | None = None  # the build's record when the native build is chosen

    def facts(self) -> dict:
        found: dict = {"source": self.source, "why": self.why}
        if self.native_build is not None:
            found["native_build"] = build.engine_facts(self.native_build)
        return found


def build_variant(facts: dict) -> str | None:
    """The native build's variant (native, native-no-amx, portable) in a server's engine facts; None for another engine."""
    return (((facts.get("choice") or {}).get("native_build")) or {}).get("variant")


def _explicit_server() -> EngineChoice | None:
    explicit = os.environ.get("LLAMA_SERVER")
    if not explicit:
        return None
    path = shutil.which(explicit) or explicit
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ServerStartError(
            f"LLAMA_SERVER is set to {explicit!r}, which is not an executable file. "
            "Point it at your llama-server binary, or unset it to use the embedded engine."
        )
    return EngineChoice("llama-server", [path], "LLAMA_SERVER", f"the llama-server LLAMA_SERVER names ({path})")


def choose_engine(native: bool = False, say: Callable[[str], None] | None = None) -> EngineChoice:
    """The one engine choice (scripts/start_server.sh, `bytesup server start`, a run's server, lessons' own servers):
    $LLAMA_SERVER, else the cached native build if it passed its smoke test on this CPU, else `llama-server` on
    PATH, else the embedded engine. BYTESUP_ENGINE=embedded skips the native build and PATH. `native`: only a
    llama-server binary will do (RPC needs one): $LLAMA_SERVER or the native build, else EngineUnavailable."""
    explicit = _explicit_server()
    if explicit is not None:
        return explicit
    wanted = os.environ.get(ENGINE_CHOICE, "auto")
    passed_over = ""
    if wanted != "embedded" or native:
        record, bin_dir, why = build.usable_build(say=say or (lambda line: print(line, file=sys.stderr)))
        if record is not None and bin_dir is not None:
            return EngineChoice("llama-server", [str(bin_dir / "llama-server")], "native build", why, record)
        passed_over = why
    if native or wanted == "native":
        raise EngineUnavailable(
            f"This needs a native llama-server built with RPC, and none is usable: {passed_over}. Build it with "
            f"`bash {build.BUILD_SCRIPT}` (about 9 minutes on 2 cores, once per machine), or set LLAMA_SERVER to "
            "a llama-server built with -DGGML_RPC=ON.")
    if wanted == "embedded":
        return EngineChoice("embedded", [sys.executable, "-m", "bytesup.llama.embedded"], "embedded",
                            f"the embedded engine ({ENGINE_CHOICE}=embedded)")
    if wanted == "fastest":
        return EngineChoice("embedded", [sys.executable, "-m", "bytesup.llama.embedded"], "embedded",
                            f"the embedded engine, the only one ready: {passed_over}. {embedded_gap_line()}")
    found = shutil.which("llama-server")
    if found:
        return EngineChoice("llama-server", [found], "PATH", f"llama-server on PATH ({found}); {passed_over}")
    return EngineChoice("embedded", [sys.executable, "-m", "bytesup.llama.embedded"], "embedded",
                        f"the embedded engine: {passed_over}, and no llama-server is on PATH")


def embedded_gap_line() -> str:
    """What the embedded engine leaves unused on this CPU, and how to get the native build that does not."""
    unused = build.unused_features(build.this_cpu(), build.embedded_system_info())
    how = ("`make native` (or the first `make test`) builds the native engine once, about 4 to 9 minutes on 2 cores, "
           "and later runs use it")
    if not unused:
        return f"On this CPU the embedded wheel's kernels use every instruction set llama.cpp's CPU kernels can; {how}."
    return (f"This CPU has {', '.join(unused)}, which the embedded wheel was built without, so its wider kernels go "
            f"unused and decode and prefill may be slower than the native build's; {how}.")


def speculation_support() -> dict:
    """Whether the engine `choose_engine` picks can decode speculatively (llama-server's --spec-type),
    and why not when it cannot. Nothing is started."""
    chosen = choose_engine()
    kind, command = chosen.kind, chosen.command
    if kind == "embedded":
        try:
            import xllamacpp
        except ImportError:
            return {"engine": kind, "supported": False, "reason": "the xllamacpp package is not installed"}
        version = getattr(xllamacpp, "__version__", "unknown")
        ok = hasattr(xllamacpp, "common_speculative_type") and hasattr(xllamacpp.CommonParams(), "speculative")
        return {"engine": kind, "build": f"xllamacpp {version}", "supported": ok,
                "reason": "" if ok else f"xllamacpp {version} exposes no speculative parameters"}
    try:
        shown = subprocess.run([command[0], "--help"], capture_output=True, text=True, timeout=60)
        text = shown.stdout + shown.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"engine": kind, "supported": False, "reason": f"{command[0]} --help failed: {exc}"}
    ok = "--spec-type" in text
    return {"engine": kind, "supported": ok,
            "reason": "" if ok else f"{command[0]} --help lists no --spec-type (an older llama-server build)"}


def _family(host: str) -> socket.AddressFamily:
    """The address family of a --host: IPv6 for an address with a colon (::1, fe80::1, [::1]), else IPv4."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def url_host(host: str) -> str:
    """A host as a URL writes it: an IPv6 address in brackets (http://[::1]:8404), any other host as it is."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def port_is_free(host: str, port: int) -> bool:
    host = host.strip("[]")
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        # SO_REUSEADDR: a port left in TIME_WAIT by a server we just stopped is free to use;
        # a port where something listens still refuses the bind.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    host = host.strip("[]")
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def state_dir_for(port: int) -> Path:
    return server_state_dir() / f"server-{port}"


@dataclass
class StartedServer:
    url: str
    pid: int
    port: int
    state_dir: Path
    info: dict

    @property
    def log_path(self) -> Path:
        return self.state_dir / "server.log"


def _pid_alive(pid: int) -> bool:
    """Whether `pid` still runs. A zombie has ended: its exit waits to be read by a parent that is not
    this process (a server that scripts/start_server.sh left to the system, where the system's first
    process does not reap), so waiting for it to vanish would only wait out the grace time."""
    import psutil

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _engine_build(kind: str, props: dict) -> str:
    build_info = str(props.get("build_info") or "unknown")
    if kind == "embedded" and ("unknown" in build_info or build_info.startswith("b0")):
        import xllamacpp

        return f"xllamacpp {xllamacpp.__version__}"
    return build_info


def _model_progress() -> Callable[[str, float], None]:
    """A progress printer for fetching or building a model: one line per quarter, on stderr."""
    shown: set[int] = set()

    def report(message: str, fraction: float) -> None:
        step = int(fraction * 4)
        if step not in shown:
            shown.add(step)
            print(f"model: {message} ({fraction:.0%})", file=sys.stderr, flush=True)

    return report


def _process_started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _is_ours(pid: int, port: int, started: float | None) -> bool:
    """Whether `pid` is still the process bytesup started for `port`: the same process start time as
    recorded in the pid file, or (an older pid file without it) that port on its command line
    (`--port PORT`, `--port=PORT` or rpc-server's `-p PORT`)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if started is not None:
            return abs(proc.create_time() - started) < 0.05
        cmd = proc.cmdline()
    except psutil.Error:
        return False
    return (any(a in ("--port", "-p") and b == str(port) for a, b in zip(cmd, cmd[1:], strict=False))
            or f"--port={port}" in cmd)


def owned_pid_in(pid_file: Path, port: int, what: str = "server") -> tuple[int | None, str | None]:
    """The one pid-ownership rule, for servers and rpc-servers alike: the pid in `pid_file` when it is
    still the process bytesup started (see `_is_ours`). A stale pid file (its process gone, or the pid
    reused by another program) is removed, and the second value says so; nothing is ever signalled."""
    if not pid_file.exists():
        return None, None
    lines = pid_file.read_text().split()
    try:
        pid = int(lines[0]) if lines else 0
        started = float(lines[1]) if len(lines) > 1 else None
    except ValueError:
        pid, started = 0, None
    if pid and _pid_alive(pid) and _is_ours(pid, port, started):
        return pid, None
    pid_file.unlink(missing_ok=True)
    if pid and _pid_alive(pid):
        why = f"which is now another program ({_command_of(pid)}), not the {what} bytesup started"
    else:
        why = "which is no longer running"
    return None, f"Removed the stale pid file {pid_file}: it named pid {pid or '?'}, {why}. No process was signalled."


def owned_pid(port: int) -> tuple[int | None, str | None]:
    """The pid of the server bytesup started on `port`, checked before it is trusted (see `owned_pid_in`)."""
    return owned_pid_in(state_dir_for(port) / "pid", port)


def _command_of(pid: int) -> str:
    import psutil

    try:
        return " ".join(psutil.Process(pid).cmdline())[:120] or "unknown command"
    except psutil.Error:
        return "unknown command"


def die_with_parent_hook():
    """Linux: a hook for Popen that makes the kernel send SIGTERM to the server when the process
    that started it dies (even by kill -9), so a lesson's own server never outlives its run.
    prctl is looked up here, in the parent: the child only calls it (no loading after fork)."""
    if sys.platform != "linux":
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return hook


def start_server(model: str | Path | None = None, flags: list[str] | tuple[str, ...] = (), wait_s: float = 180.0,
                 die_with_parent: bool = False, native: bool = False, answer_s: float = PROPS_WAIT_S,
                 engine: EngineChoice | None = None, stop_check: Callable[[], None] | None = None) -> StartedServer:
    """Start a server in the background, wait for /health, and record what was started.

    An API key reaches the engine through the LLAMA_API_KEY environment variable (read by
    llama-server and by `python -m bytesup.llama.embedded`), never on its command line, where `ps` shows it.
    `die_with_parent`: stop the server when this process dies (servers of a lesson's own).
    `native`: a llama-server binary only ($LLAMA_SERVER or the native build), as RPC needs (see `choose_engine`).
    `answer_s`: how long /props may take once the server is ready (a run's --timeout; each /health poll waits at
    most READY_POLL_S of it). `engine`: this engine rather than `choose_engine`'s (the run's comparison of engines).
    `stop_check`: called at each poll while the server starts; it raises to stop the start (a run's stop signal whose
    exception Python dropped, see run.folder.raise_if_stopping), and the half-started server is stopped as on Ctrl-C."""
    merged = merge_flags(list(flags))
    chosen = engine or choose_engine(native=native or bool(merged.get("--rpc")))  # --rpc: only a native llama-server has RPC
    if model is None and merged.get("--model"):
        model = merged["--model"]
    if model is None:
        model = ensure_model(progress=_model_progress())
    elif not Path(model).exists() and (str(model) in REAL_MODELS or str(model) in PRESETS):
        model = ensure_model(str(model), progress=_model_progress())  # a model's name: fetched, derived or built first when missing
    model = Path(model).expanduser().resolve()
    check_gguf(model)
    merged["--model"] = str(model)
    draft_name = merged.get("--spec-draft-model")
    if draft_name:  # a draft model, like the model, may be given by name
        draft = Path(draft_name)
        if not draft.exists() and (draft_name in REAL_MODELS or draft_name in PRESETS):
            draft = ensure_model(draft_name, progress=_model_progress())
        draft = draft.expanduser().resolve()
        check_gguf(draft)
        merged["--spec-draft-model"] = str(draft)

    host = merged.get("--host") or "127.0.0.1"
    port = parse_port(merged.get("--port") or "8099")
    state = state_dir_for(port)
    pid_file = state / "pid"
    old, stale = owned_pid(port)
    if stale:
        print(stale, file=sys.stderr)
    if old:
        raise ServerStartError(
            f"A server started by bytesup is already running on port {port} (pid {old}). "
            f"Use it, stop it with `scripts/stop_server.sh --port {port}`, or start another with --port."
        )
    if not port_is_free(host, port):
        raise ServerStartError(
            f"Port {port} on {host} is already in use by another program. Stop that program, or "
            f"start on another port (`scripts/start_server.sh --port {port + 1}`) and pass "
            f"`--server http://{url_host(host)}:{port + 1}` to the lessons."
        )

    command = chosen.command
    on_command_line = {k: v for k, v in merged.items() if k != "--api-key"}
    api_key = merged.get("--api-key")
    env = {**os.environ, "LLAMA_API_KEY": api_key} if api_key else None
    argv = command + flags_to_argv(on_command_line)
    log_path = state / "server.log"
    try:
        state.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "wb")
    except OSError as exc:
        raise ServerStartError(
            f"Could not make the server's folder {state} for its pid file and log ({exc.strerror or exc}). Nothing "
            "was started. Set BYTESUP_STATE to a folder you can write to (or free some space), then start again."
        ) from None
    with log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=env, preexec_fn=die_with_parent_hook() if die_with_parent else None)
    # The process's start time beside its pid: a pid reused by another program is never taken for it.
    # Whole or not at all (renamed into place): another bytesup reading it meanwhile (a stop, a start on this port)
    # would take an empty file for a stale one and remove it, leaving the server without its pid file.
    write_text_atomic(pid_file, f"{proc.pid}\n{_process_started(proc.pid) or ''}\n")
    try:
        return _wait_ready(proc, chosen, merged, model, host, port, state, wait_s, answer_s, stop_check)
    except BaseException as exc:
        # Ctrl-C or an error while waiting: the half-started server is not left behind. After an error its log
        # stays for the message to point at; after a stop nobody reads it, and the folder goes.
        _terminate(proc.pid)
        pid_file.unlink(missing_ok=True)
        if isinstance(exc, KeyboardInterrupt):
            shutil.rmtree(state, ignore_errors=True)
        raise


def _wait_ready(proc: subprocess.Popen, chosen: EngineChoice, merged: dict, model: Path, host: str, port: int,
                state: Path, wait_s: float, answer_s: float = PROPS_WAIT_S,
                stop_check: Callable[[], None] | None = None) -> StartedServer:
    kind, command = chosen.kind, chosen.command
    pid_file = state / "pid"
    log_path = state / "server.log"

    connect_host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else host
    url = f"http://{url_host(connect_host)}:{port}"
    headers = {"Authorization": f"Bearer {merged['--api-key']}"} if merged.get("--api-key") else {}
    deadline = time.monotonic() + wait_s
    props: dict = {}
    while True:
        if stop_check is not None:
            stop_check()
        if proc.poll() is not None:
            pid_file.unlink(missing_ok=True)
            crashed = f" (killed by {build.signal_name(proc.returncode)})" if proc.returncode < 0 else ""
            hint = f" {REBUILD_HINT}" if kind == "llama-server" else ""
            raise ServerStartError(
                f"The {kind} server ({chosen.why}) exited with code {proc.returncode}{crashed} before it was ready "
                f"(model {model}).{hint} Last lines of {log_path}:\n{_log_tail(log_path)}"
            )
        try:
            h = httpx.get(f"{url}/health", headers=headers, timeout=min(READY_POLL_S, answer_s))
            if h.status_code == 200 and h.json().get("status") == "ok":
                props = httpx.get(f"{url}/props", headers=headers, timeout=answer_s).json()
                break
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() > deadline:
            _terminate(proc.pid)
            pid_file.unlink(missing_ok=True)
            raise ServerStartError(
                f"The {kind} server did not become ready within {wait_s:g} s (model {model}). "
                f"It was stopped. Last lines of {log_path}:\n{_log_tail(log_path)}"
            )
        time.sleep(READY_PAUSE_S)

    info = {
        "engine": kind,
        "command": command[0] if kind == "llama-server" else "python -m bytesup.llama.embedded",
        "build": _engine_build(kind, props),
        "build_info": props.get("build_info"),
        "choice": chosen.facts(),
        "flags": redacted(merged),
        "model": str(model),
        "url": url,
        "pid": proc.pid,
        "started_at": utc_now(),
    }
    if merged.get("--rpc"):  # layers split across rpc-servers: which endpoint holds what, from the load log
        info["topology"] = topology.from_log_file(log_path, merged["--rpc"])
    (state / STATE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return StartedServer(url=url, pid=proc.pid, port=port, state_dir=state, info=info)


def _terminate(pid: int, grace_s: float = 10.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
        except ChildProcessError:
            if not _pid_alive(pid):
                return
        time.sleep(EXIT_PAUSE_S)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_server(port: int = 8099) -> bool:
    """Stop the server we started on `port`, by its pid file, once the pid is checked to be that
    server (see `owned_pid`). False when there was none to stop."""
    pid, _ = owned_pid(port)
    if pid is None:
        return False
    _terminate(pid)
    (state_dir_for(port) / "pid").unlink(missing_ok=True)
    return True


def read_engine_info(port: int) -> dict | None:
    """What was recorded about the server we started on `port`, if it is still running."""
    state = state_dir_for(port)
    try:
        info = json.loads((state / STATE_FILE).read_text())
        pid = int((state / "pid").read_text().split()[0])
    except (OSError, ValueError):
        return None
    return info if _pid_alive(pid) and info.get("pid") == pid else None


def server_status(port: int = 8099) -> dict:
    info = read_engine_info(port)
    return {"port": port, "running": info is not None, **(info or {})}


def parse_port(value: str | int) -> int:
    """A TCP port from a flag: a whole number from 1 to 65535, or a one-paragraph error."""
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if not 1 <= port <= 65535:
        raise ServerStartError(f"--port must be a whole number from 1 to 65535, not {value!r}. Example: "
                               "scripts/start_server.sh --port 8100")
    return port


def _port_from(argv: list[str], default: int = 8099) -> int:
    return parse_port(parse_flags(argv).get("--port") or default)


def main(argv: list[str] | None = None) -> int:
    """`python -m bytesup.llama.process start [MODEL] [flags…] | stop [--port N] | status [--port N]`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        print("usage: start_server.sh [MODEL.gguf] [llama-server flags…]; stop_server.sh [--port N]")
        print(f"default flags: {' '.join(DEFAULT_FLAGS)}")
        return 0
    action, rest = argv[0], argv[1:]
    try:
        if action == "start":
            model = rest.pop(0) if rest and not rest[0].startswith("-") else None
            started = start_server(model, rest)
            print(f"engine: {started.info['choice']['why']}")
            print(f"{started.info['engine']} server ({started.info['build']}) ready at {started.url}, pid {started.pid}")
            print(f"model {started.info['model']}; log {started.log_path}")
            return 0
        if action == "stop":
            port = _port_from(rest)
            _, stale = owned_pid(port)
            if stale:
                print(stale, file=sys.stderr)
            if stop_server(port):
                print(f"stopped the server on port {port}")
            else:
                print(f"no server started by bytesup on port {port} (nothing to stop)")
            return 0
        if action == "status":
            print(json.dumps(server_status(_port_from(rest)), indent=2))
            return 0
    except BytesupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("stopped by Ctrl-C: a server that was starting was stopped and its folder under .run/ removed; nothing "
              "is left running", file=sys.stderr)
        return 130
    print(f"unknown action {action!r}: use start, stop or status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
