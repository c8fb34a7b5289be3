# sbemu: every target bootstraps what it needs (virtual environment, pip install from pyproject.toml).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark
ARGS ?=

.PHONY: install install-spark java-check node-check test-js run test lint bench report clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(PY) -m pip install -q -e '.[test,dev]'
	@touch $(STAMP)

install: $(STAMP)

# Spark needs Java 17+: use the machine's, else install Debian's headless JRE when we can.
java-check:
	@if java -version >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Java not found: installing openjdk-17-jre-headless for Spark"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null) \
	    || echo "WARNING: could not install Java; the Spark tests will be skipped"; \
	else echo "WARNING: Java 17+ not found; the Spark tests will be skipped"; fi

# pyspark ships as a large source archive that pip builds once (about a minute; pip caches it).
$(SPARK_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,dev,spark]'
	@touch $(SPARK_STAMP)

install-spark: $(SPARK_STAMP) java-check

# The JS SDK suite (tests/js) needs Node 18+ and npm: use the machine's, else Debian's when root.
node-check:
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Node.js not found: installing nodejs and npm from Debian for the JS SDK tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null) \
	    || echo "WARNING: could not install Node.js; the JS SDK tests will be skipped"; \
	else echo "WARNING: Node.js/npm not found; the JS SDK tests will be skipped"; fi

# @azure/service-bus exactly as pinned in tests/js/package-lock.json, into tests/js/node_modules.
tests/js/node_modules/.package-lock.json: tests/js/package-lock.json
	npm ci --prefix tests/js --no-audit --no-fund --loglevel=error

# node's own test runner against the real server (the suites start it from .venv).
test-js: install node-check
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory tests/js/node_modules/.package-lock.json && \
	  cd tests/js && node --test --test-reporter=spec *.test.mjs; \
	else echo "SKIPPED: JS SDK tests (tests/js): no Node.js/npm on this machine"; fi

run:
	@test -f $(STAMP) || echo "First run: creating .venv and installing sbemu and its dependencies (a few seconds, longer without pip's cache)..."
	@$(MAKE) --no-print-directory install
	$(VENV)/bin/sbemu serve $(ARGS)

test: install install-spark
	$(PY) -m pytest -q tests
	@$(MAKE) --no-print-directory test-js

lint: install
	$(VENV)/bin/ruff check src tests sparkjobs
	$(VENV)/bin/mypy src

bench: install
	$(PY) bench/bench.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache tests/js/node_modules

# spark: reporting tables from the partition logs into ./reports (ARGS=--follow keeps running);
# see sparkjobs/README.md
report: install-spark
	$(VENV)/bin/sbemu report --data-dir .sbemu --out reports $(ARGS)
