"""The `bytesup` command line: the app, what its commands share, and the report commands. The top layer."""

import sys
import traceback

_previous_hook = sys.excepthook


def _interrupt_hook(kind, value, tb) -> None:
    """Ctrl-C that no command caught (it came while bytesup's modules were loading, before any command ran): one
    line instead of a traceback. Python then exits as a process stopped by SIGINT does (status 130)."""
    if not issubclass(kind, KeyboardInterrupt):
        _previous_hook(kind, value, tb)
        return
    loading = any(frame.filename.startswith("<frozen importlib") for frame in traceback.extract_tb(tb))
    print("Stopped by Ctrl-C" + (" while bytesup was loading, before it started anything: nothing was run or written."
                                 if loading else "."), file=sys.stderr, flush=True)


sys.excepthook = _interrupt_hook
