# sbemu: every target bootstraps what it needs (virtual environment, pip install from pyproject.toml).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark
ARGS ?=

.PHONY: install install-spark java-check chromium-check run test lint bench bench-compare bench-node bench-rabbitmq report clean

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

# The dashboard's browser tests drive Debian's Chromium through its chromedriver (no browser
# download at test time): install both when missing and we are root, else the tests skip.
chromium-check:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Chromium not found: installing chromium and chromium-driver for the dashboard tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	    || echo "WARNING: could not install Chromium; the dashboard browser tests will be skipped"; \
	else echo "WARNING: chromium/chromedriver not found; the dashboard browser tests will be skipped"; fi

# pyspark ships as a large source archive that pip builds once (about a minute; pip caches it).
$(SPARK_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,dev,spark]'
	@touch $(SPARK_STAMP)

install-spark: $(SPARK_STAMP) java-check

run: install
	$(VENV)/bin/sbemu serve $(ARGS)

# make test runs make lint first: ruff, mypy and the import-layer contracts must pass.
test: install install-spark chromium-check lint
	$(PY) -m pytest -q tests

lint: install
	$(VENV)/bin/ruff check src tests sparkjobs
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

bench: install bench-node
	$(PY) bench/bench.py $(ARGS)

# rhea (npm, pinned by bench/node/package-lock.json) for the latency phase and bench-compare.
bench-node:
	@command -v node >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
	  else echo "the latency bench needs Node.js"; exit 1; fi; }
	@test -d bench/node/node_modules/rhea || (cd bench/node && npm ci --no-audit --no-fund --silent)

# sbemu vs Debian's RabbitMQ 3.10 (AMQP 1.0 plugin), same rhea client, alternating rounds;
# installs rabbitmq-server (apt, as root) when absent. bench/compare.py runs its own node.
bench-rabbitmq:
	@test -x /usr/lib/rabbitmq/bin/rabbitmq-server || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing rabbitmq-server from Debian"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null; \
	  else echo "bench-compare needs rabbitmq-server (apt-get install as root)"; exit 1; fi; }

bench-compare: install bench-node bench-rabbitmq
	$(PY) bench/compare.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# spark: reporting tables from the partition logs into ./reports (ARGS=--follow keeps running);
# see sparkjobs/README.md
report: install-spark
	$(VENV)/bin/sbemu report --data-dir .sbemu --out reports $(ARGS)
