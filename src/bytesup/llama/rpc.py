"""llama.cpp's RPC servers: the native build that has them, starting and stopping them, and a
llama-server that drives them.

The embedded engine (xllamacpp) has no RPC; `scripts/build_llama_server.sh` builds llama-server,
llama-bench and rpc-server with -DGGML_RPC=ON into `<cache>/llama.cpp-<version>/bin` (see
`paths.cache_dir`). An rpc-server has no authentication: whoever reaches its port can run any
computation and read any memory it was given. So `start_rpc_server` binds 127.0.0.1 unless the caller
passes another host on purpose (`allow_remote=True`; the command line never does: a remote rpc-server
is started by hand on its own machine).

Each started rpc-server gets `.run/rpc-<port>/` with its pid (and process start time) and log.
`python -m bytesup.llama.rpc` is what scripts/start_server.sh and scripts/stop_server.sh run:
    serve [MODEL] [llama-server flags…]  start a server on the one engine choice (process.choose_engine)
    stop [--port N]                       stop it, then the loopback rpc-servers of its --rpc that bytesup started
    start-rpc --port N [--threads T]      one rpc-server on 127.0.0.1:N
    stop-rpc --port N
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

from bytesup.files import write_text_atomic
from bytesup.llama import process
from bytesup.llama import build
from bytesup.llama import topology
from bytesup.errors import BytesupError, EngineUnavailable, ServerStartError
from bytesup.paths import server_state_dir
from bytesup.llama.placement import is_loopback

BUILD_SCRIPT = build.BUILD_SCRIPT
LOOPBACK = "127.0.0.1"
# The names the RPC tool has had: ggml-rpc-server in recent llama.cpp, rpc-server before.
RPC_PROGRAMS = ("rpc-server", "ggml-rpc-server")
# llama-server prints where each layer went (the "model buffer size" lines) at log verbosity 4 and up.
TOPOLOGY_LOG = ["-lv", "4"]


class RpcUnavailable(EngineUnavailable):
    """No rpc-server, or no llama-server that can drive one."""


# --- the native build ----------------------------------------------------------------------------

def native_bin_dir() -> Path | None:
    """The bin folder of the newest cached native build that passed its smoke test on this CPU, or None."""
    return build.usable_build()[1]


def native_program(name: str) -> Path | None:
    """llama-server, llama-bench or rpc-server of the cached native build (see `build`)."""
    folder = native_bin_dir()
    path = folder / name if folder else None
    return path if path is not None and os.access(path, os.X_OK) else None


def rpc_server_program() -> Path:
    """$RPC_SERVER, else the cached native build's rpc-server, else one on PATH."""
    explicit = os.environ.get("RPC_SERVER")
    if explicit:
        path = Path(shutil.which(explicit) or explicit)
        if not os.access(path, os.X_OK):
            raise RpcUnavailable(f"RPC_SERVER is set to {explicit!r}, which is not an executable file.")
        return path
    found = native_program("rpc-server") or next((Path(p) for n in RPC_PROGRAMS if (p := shutil.which(n))), None)
    if found is None:
        raise RpcUnavailable(
            "No llama.cpp rpc-server was found (the embedded engine has no RPC). Build one with "
            f"`bash {BUILD_SCRIPT}` (once per machine; about 9 minutes on 2 cores), or set RPC_SERVER to yours.")
    return found


def rpc_llama_server() -> Path:
    """The llama-server that drives rpc-servers, by the one engine choice (`process.choose_engine(native=True)`)."""
    try:
        return Path(process.choose_engine(native=True).command[0])
    except EngineUnavailable as exc:
        raise RpcUnavailable(str(exc)) from None


# --- rpc-server processes --------------------------------------------------------------------------

@dataclass
class RpcServer:
    endpoint: str
    pid: int
    port: int
    threads: int | None
    state_dir: Path

    @property
    def log_path(self) -> Path:
        return self.state_dir / "rpc-server.log"


def rpc_state_dir(port: int) -> Path:
    return server_state_dir() / f"rpc-{port}"


def _listening(pid: int, port: int) -> bool:
    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


def start_rpc_server(port: int, threads: int | None = None, host: str = LOOPBACK, *, allow_remote: bool = False,
                     die_with_parent: bool = False, wait_s: float = 30.0) -> RpcServer:
    """Start one rpc-server on host:port and wait until it listens. Only loopback unless
    `allow_remote`: an rpc-server has no authentication."""
    if not is_loopback(host) and not allow_remote:
        raise BytesupError(
            f"Refusing to bind an rpc-server to {host}: an rpc-server has no authentication, so anyone who reaches "
            "that address can run computations on this machine and read what it holds. Bind 127.0.0.1 (the default), "
            "or, on a network you trust, start it by hand with the native build's rpc-server -H HOST.")
    old, _ = owned_rpc_pid(port)
    if old:
        raise ServerStartError(f"An rpc-server started by bytesup already runs on port {port} (pid {old}). "
                               f"Use it, or stop it with `bytesup server stop-rpc --port {port}`.")
    if not process.port_is_free(host, port):
        raise ServerStartError(f"Port {port} on {host} is already in use. Pick another --port.")
    program = rpc_server_program()
    argv = [str(program), "-H", host, "-p", str(port)]
    if threads:
        argv += ["-t", str(threads)]
    state = rpc_state_dir(port)
    state.mkdir(parents=True, exist_ok=True)
    log_path = state / "rpc-server.log"
    hook = process.die_with_parent_hook() if die_with_parent else None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=hook)
    try:
        write_text_atomic(state / "pid", f"{proc.pid}\n{process._process_started(proc.pid) or ''}\n")  # whole, as a server's
        deadline = time.monotonic() + wait_s
        while not _listening(proc.pid, port):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-1500:]
                raise ServerStartError(f"The rpc-server on {host}:{port} did not start listening ({program}). "
                                       f"Its log {log_path}:\n{tail}")
            time.sleep(0.1)
    except BaseException:  # failed, or Ctrl-C / SIGTERM while waiting: never leave it running
        if not stop_rpc_server(port):
            proc.kill()
        raise
    return RpcServer(endpoint=f"{host}:{port}", pid=proc.pid, port=port, threads=threads, state_dir=state)


def owned_rpc_pid(port: int) -> tuple[int | None, str | None]:
    """The pid of the rpc-server bytesup started on `port`, by the servers' own rule (`process.owned_pid_in`)."""
    return process.owned_pid_in(rpc_state_dir(port) / "pid", port, "rpc-server")


def stop_rpc_server(port: int) -> bool:
    """Stop the rpc-server bytesup started on `port` (by its checked pid file); False when none."""
    pid, _ = owned_rpc_pid(port)
    state = rpc_state_dir(port)
    if pid is None:
        return False
    process._terminate(pid, grace_s=5.0)
    (state / "pid").unlink(missing_ok=True)
    return True


def stop_rpc_endpoints(rpc_flag: str | None) -> list[str]:
    """Stop the rpc-servers among `--rpc`'s endpoints that bytesup started on this host's loopback."""
    stopped = []
    for endpoint in topology.endpoints(rpc_flag):
        host, _, port = endpoint.rpartition(":")
        if is_loopback(host) and port.isdigit() and stop_rpc_server(int(port)):
            stopped.append(endpoint)
    return stopped


@contextlib.contextmanager
def loopback_rpc_servers(threads: list[int]) -> Iterator[list[RpcServer]]:
    """One rpc-server per entry of `threads` on free loopback ports, stopped on every way out
    (an exception, Ctrl-C, SIGTERM raised by the runner) and by the kernel if this process dies."""
    started: list[RpcServer] = []
    try:
        for t in threads:
            started.append(start_rpc_server(process.free_port(LOOPBACK), t, die_with_parent=True))
        yield started
    finally:
        for server in started:
            stop_rpc_server(server.port)
            shutil.rmtree(server.state_dir, ignore_errors=True)


# --- what a started server tells ------------------------------------------------------------------

def server_log_topology(url: str, rpc_flag: str | None) -> dict:
    """The topology a llama-server bytesup started at `url` printed while loading (its state folder's log)."""
    port = urlparse(url).port
    log = process.state_dir_for(port) / "server.log" if port else Path("/nonexistent")
    return topology.from_log_file(log, rpc_flag)


def record_topology(shared, lesson_id: str, setup: str, where: dict) -> None:
    """Write a lesson's server topology into the run manifest (`topologies`, keyed "<lesson>/<setup>"), so
    the run's manifest shows each split; `shared` is the run's RunShared (its manifest and save)."""
    shared.manifest.topologies[f"{lesson_id}/{setup}"] = where
    shared.save()


def connect_seconds(endpoint: str, samples: int = 5, timeout_s: float = 5.0) -> list[float]:
    """Seconds a TCP connection to `endpoint` takes to open (one network round trip), `samples` times.
    Taken before a llama-server connects: an rpc-server serves one client at a time."""
    host, _, port = endpoint.rpartition(":")
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            times.append(time.perf_counter() - start)
    return times


def median_connect_seconds(endpoints: list[str], samples: int = 5) -> dict[str, float]:
    return {e: statistics.median(connect_seconds(e, samples)) for e in endpoints}


# --- the scripts' entry point ----------------------------------------------------------------------

def _flag_value(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def serve(argv: list[str]) -> int:
    """scripts/start_server.sh: start the server as process.main does, on the one engine choice
    (`process.choose_engine`); --rpc takes a native llama-server only, with the log verbosity that shows the split."""
    wants_rpc = _flag_value(argv, "--rpc") is not None
    if wants_rpc and not any(a in ("-lv", "--verbosity", "--log-verbosity") or a.startswith("--verbosity=") for a in argv):
        argv = [*argv, *TOPOLOGY_LOG]  # so engine.json can record the split
    return process.main(["start", *argv])


def stop(argv: list[str]) -> int:
    """scripts/stop_server.sh: stop the server, then the loopback rpc-servers of its --rpc that bytesup started."""
    given = _flag_value(argv, "--port") or "8099"
    if not given.isdigit() or not 1 <= int(given) <= 65535:
        print("usage: scripts/stop_server.sh [--port N] (N from 1 to 65535)", file=sys.stderr)
        return 2
    port = int(given)
    info = process.read_engine_info(port) or {}
    code = process.main(["stop", *argv])
    for endpoint in stop_rpc_endpoints((info.get("flags") or {}).get("--rpc")):
        print(f"stopped the rpc-server at {endpoint}")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    action, rest = argv[0], argv[1:]
    try:
        if action == "serve":
            return serve(rest)
        if action == "stop":
            return stop(rest)
        if action in ("start-rpc", "stop-rpc"):
            port = _flag_value(rest, "--port")
            if port is None or not port.isdigit() or not 1 <= int(port) <= 65535:
                print(f"usage: python -m bytesup.llama.rpc {action} --port N" + (" [--threads T]" if action == "start-rpc" else ""),
                      file=sys.stderr)
                return 2
            if action == "stop-rpc":
                print(f"stopped the rpc-server on port {port}" if stop_rpc_server(int(port)) else
                      f"no rpc-server started by bytesup on port {port} (nothing to stop)")
                return 0
            threads = _flag_value(rest, "--threads")
            if threads is not None and not threads.isdigit():
                print(f"usage: python -m bytesup.llama.rpc {action} --port N [--threads T] (T a whole number)", file=sys.stderr)
                return 2
            server = start_rpc_server(int(port), int(threads) if threads else None)
            print(f"rpc-server listening on {server.endpoint} (pid {server.pid}; log {server.log_path}); "
                  f"no authentication: loopback only")
            return 0
    except BytesupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"unknown action {action!r}: use serve, stop, start-rpc or stop-rpc", file=sys.stderr)
    return 2


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
