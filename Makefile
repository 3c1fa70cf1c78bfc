# Every target sets up ./.venv first (only Python 3.11/3.12 and make are needed).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# The extras make setup installs: the tests' (dev) and every command's (server, export, plots).
EXTRAS ?= dev,server,export,plots

.PHONY: setup demo test lint bench proto clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/keepersim compare

test: setup
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy keepersim

bench: setup
	$(PY) scripts/bench.py

proto: setup
	$(PY) scripts/gen_proto.py

clean:
	rm -rf $(VENV) keepersim-report .keepersim

# Golden outputs (scripts/golden.py): record before a refactor, check after it.
.PHONY: golden golden-check
# Worker processes: every core unless GOLDEN_JOBS is set (make golden-check GOLDEN_JOBS=2).
GOLDEN_JOBS ?=
GOLDEN_ARGS = $(if $(GOLDEN_JOBS),--jobs $(GOLDEN_JOBS))

golden: setup
	$(PY) scripts/golden.py record $(GOLDEN_ARGS)

golden-check: setup
	$(PY) scripts/golden.py check $(GOLDEN_ARGS)
