"""The `bytesup` command line: the app, what its commands share, and the report commands. The top layer."""

import atexit
import sys
import traceback

_previous_hook = sys.excepthook
# Set once a KeyboardInterrupt reached the top uncaught: then the process dies by SIGINT, as it should.
_uncaught: list[bool] = []


def _interrupt_hook(kind, value, tb) -> None:
    """Ctrl-C that no command caught (it came while bytesup's modules were loading, before any command ran): one
    line instead of a traceback. Python then exits as a process stopped by SIGINT does (status 130)."""
    if not issubclass(kind, KeyboardInterrupt):
        _previous_hook(kind, value, tb)
        return
    _uncaught.append(True)
    loading = any(frame.filename.startswith("<frozen importlib") for frame in traceback.extract_tb(tb))
    print("Stopped by Ctrl-C" + (" while bytesup was loading, before it started anything: nothing was run or written."
                                 if loading else "."), file=sys.stderr, flush=True)


def _keep_the_exit_status() -> None:
    """A Ctrl-C that bytesup caught ends with the status the command chose (130 after a stopped run), not with SIGINT.

    CPython (3.11 to 3.13) marks an interrupt as uncaught when it passes out of code that `exec` or `eval` ran from a
    string (a dataclass or namedtuple being made as a module loads), even if a caller then catches it, and at exit
    kills the process with SIGINT whatever status `sys.exit` gave. Running a string once more clears that mark. Not
    done when the interrupt really was uncaught (the hook above saw it)."""
    if not _uncaught:
        exec("pass")  # noqa: S102 - a constant string: only its run matters


sys.excepthook = _interrupt_hook
atexit.register(_keep_the_exit_status)
