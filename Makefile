# The two commands: `make run` (every lesson against the embedded default model) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8099
ARGS ?=

.PHONY: run test install install-test model clean-state

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

model: install
	$(PY) -m bytesup model build

run: install model
	bash scripts/run_course.sh --port $(PORT) $(ARGS)

test: install-test
	$(PY) -m pytest -q

clean-state:
	rm -rf .run
