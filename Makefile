# sbemu: every target bootstraps what it needs (virtual environment, pip install from pyproject.toml).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark
ARGS ?=

.PHONY: install install-spark java-check run test lint bench report clean fuzz crash-test soak load

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

run: install
	$(VENV)/bin/sbemu serve $(ARGS)

test: install install-spark
	$(PY) -m pytest -q tests

lint: install
	$(VENV)/bin/ruff check src tests sparkjobs
	$(VENV)/bin/mypy src

bench: install
	$(PY) bench/bench.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# spark: reporting tables from the partition logs into ./reports (ARGS=--follow keeps running);
# see sparkjobs/README.md
report: install-spark
	$(VENV)/bin/sbemu report --data-dir .sbemu --out reports $(ARGS)

# hardening (see README "Guarantees and how we test them"): long runs of the suites whose
# bounded parts run in `make test` (tests/fuzz, tests/crash, tests/load)
fuzz: install
	$(PY) -m hardening.fuzz $(ARGS)

crash-test: install
	$(PY) -m hardening.crash $(ARGS)

soak: install
	$(PY) -m hardening.soak $(ARGS)

load: install
	$(PY) -m hardening.load $(ARGS)
