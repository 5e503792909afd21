"""Run by a lesson script whose Python cannot import bytesup (see the `try: import bytesup` at the top
of each lesson), with `script` set to the lesson's file.

When the project's virtual environment exists (`.venv/`, which `make install` creates next to
`lessons/`), the lesson is run again with that environment's Python and the same arguments.
Otherwise it says what to run and exits non-zero. Only the standard library is used here: nothing
else can be assumed installed.
"""

import os
import sys
from pathlib import Path

MARK = "BYTESUP_REEXEC"  # set for the re-run, so a .venv without bytesup cannot loop

lesson = Path(globals()["script"]).resolve()  # given by the lesson (runpy init_globals)
root = lesson.parent.parent
venv = root / ".venv"
python = venv / "bin" / "python"
here = Path(sys.prefix).resolve() == venv.resolve()

if python.exists() and not here and not os.environ.get(MARK):
    print(f"bytesup is not installed for {sys.executable}: running {lesson.name} with {python} instead.",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execve(python, [str(python), str(lesson), *sys.argv[1:]], {**os.environ, MARK: "1"})

if python.exists():
    print(f"error: {python} cannot import bytesup. Run `make install` in {root} to install the project "
          "into it, then run the lesson again.", file=sys.stderr)
else:
    print(f"error: bytesup is not installed for {sys.executable}, and {root} has no .venv. Run `make install` "
          f"in {root} (it creates .venv; any `python` then finds it), or activate the environment where "
          f"bytesup is installed, then run `python lessons/{lesson.name}` again.", file=sys.stderr)
sys.exit(1)
