# sbemu: every target bootstraps what it needs (virtual environment, pip install from pyproject.toml).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install run test lint bench report clean spark-check

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(PY) -m pip install -q -e '.[test,dev]'
	@touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/sbemu serve $(ARGS)

test: install
	$(PY) -m pytest -q tests

lint: install
	$(VENV)/bin/ruff check src tests sparkjobs
	$(VENV)/bin/mypy src

bench: install
	$(PY) bench/bench.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
