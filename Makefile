# sbemu: every target bootstraps what it needs (virtual environment, pip install from pyproject.toml).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
SPARK_STAMP := $(VENV)/.installed-spark
ARGS ?=

.PHONY: docs install install-spark java-check chromium-check disk-tools-check netns-check node-check js-deps test-js maven-check java-deps test-java go-check go-deps test-go test-sdks test-sdk-suite compat-table run test lint bench bench-profile valgrind-check bench-compare bench-node bench-rabbitmq bench-artemis bench-sdk report clean fuzz crash-test soak load image podman-check test-container

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(PY) -m pip install -q -e '.[test,dev,docs]'
	@touch $(STAMP)

install: $(STAMP)

# make run needs only the server's own dependencies (no test or dev extras), installed quietly:
# pip's output is kept in .venv/pip-run.log and shown only when the install fails. A full
# install (make test, make install) covers it.
$(RUN_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; else \
	  echo "installing sbemu and its dependencies into $(VENV) (once)..."; \
	  $(PY) -m pip install -q --disable-pip-version-check -e . >$(VENV)/pip-run.log 2>&1 \
	    || { cat $(VENV)/pip-run.log; exit 1; }; fi
	@touch $(RUN_STAMP)

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
# certutil (libnss3-tools) trusts sbemu's CA in Chromium's NSS database for the page that runs
# the JS SDK over wss (tests/ui/test_browser_sdk.py), as mkcert -install does for a developer.
chromium-check:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 \
	    && command -v certutil >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Chromium or certutil not found: installing chromium, chromium-driver and libnss3-tools for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver libnss3-tools >/dev/null) \
	    || echo "WARNING: could not install Chromium; the browser tests will be skipped"; \
	else echo "WARNING: chromium/chromedriver/certutil not found; the browser tests will be skipped"; fi

# The disk-fault tests (tests/faults/test_disk_faults.py) put a small ext4 on a loop device:
# mkfs.ext4 and e2fsck come from Debian's e2fsprogs (losetup, mount and fsfreeze from
# util-linux, always there). Installed when missing and we are root, else those tests skip.
disk-tools-check:
	@if command -v mkfs.ext4 >/dev/null 2>&1 && command -v e2fsck >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "e2fsprogs not found: installing it for the disk-fault tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq e2fsprogs >/dev/null) \
	    || echo "WARNING: could not install e2fsprogs; the disk-fault tests will be skipped"; \
	else echo "WARNING: mkfs.ext4/e2fsck not found; the disk-fault tests will be skipped"; fi

# The admin-port access test (tests/security/test_admin_policy.py) reaches the server from a
# network namespace (`ip netns`, iproute2): installed when missing and we are root, else it skips.
netns-check:
	@if command -v ip >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "ip not found: installing iproute2 for the admin-port access test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null) \
	    || echo "WARNING: could not install iproute2; the network-namespace test will be skipped"; \
	else echo "WARNING: ip (iproute2) not found; the network-namespace test will be skipped"; fi

# pyspark ships as a large source archive that pip builds once (about a minute; pip caches it).
$(SPARK_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,dev,docs,spark]'
	@touch $(SPARK_STAMP)

install-spark: $(SPARK_STAMP) java-check
	@$(PY) -m sparkjobs.cds >/dev/null 2>&1 || echo "WARNING: no class-data-sharing archive for the local Spark driver (slower warm-up)"

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

# The npm packages when Node is there (pytest's JS admin-client test needs them too).
js-deps: node-check
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory tests/js/node_modules/.package-lock.json; fi

# node's own test runner against the real server (the suites start it from .venv).
test-js: install js-deps
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  cd tests/js && node --test --test-reporter=spec *.test.mjs; \
	else echo "SKIPPED: JS SDK tests (tests/js): no Node.js/npm on this machine"; fi

# The Java SDK suite (tests/java, JUnit 5) needs a JDK 17+ and Maven: the machine's, else
# Debian's when root. Its dependencies (azure-messaging-servicebus as azure-sdk-bom pins it) are
# resolved from Maven Central once into tests/java/.m2repo (gitignored) and compiled there.
MVN := mvn -B -ntp -Dmaven.repo.local=$(CURDIR)/tests/java/.m2repo -f tests/java/pom.xml
maven-check:
	@if command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Maven/JDK not found: installing maven and openjdk-17-jdk-headless for the Java SDK tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven openjdk-17-jdk-headless >/dev/null) \
	    || echo "WARNING: could not install Maven; the Java SDK tests will be skipped"; \
	else echo "WARNING: mvn/javac not found; the Java SDK tests will be skipped"; fi

tests/java/.m2repo/.resolved: tests/java/pom.xml
	$(MVN) -q test-compile
	@touch $@

java-deps: maven-check
	@if command -v mvn >/dev/null 2>&1; then $(MAKE) --no-print-directory tests/java/.m2repo/.resolved; fi

# JUnit against a real sbemu that tests/sdk_run.py starts for the run (connection strings and
# the trust store for the admin client's HTTPS in the environment); then the 100 MB messages
# (LargeMessagesTest, tag "premium") against a Premium server of their own.
test-java: install java-deps
	@if command -v mvn >/dev/null 2>&1; then \
	  $(PY) tests/sdk_run.py -- $(MVN) test && \
	  $(PY) tests/sdk_run.py --premium -- $(MVN) test -Dsbemu.groups=premium -Dsbemu.excludedGroups=none; \
	else echo "SKIPPED: Java SDK tests (tests/java): no Maven on this machine"; fi

# The Go SDK suite (tests/go: azservicebus and its admin package, pinned by go.sum) and the
# module's own live tests, run from the module cache unchanged (tests/go/live.py, with the
# not-applicable list tests/go/not-applicable.txt). Go from the machine, else Debian's (when
# root; its go command fetches the toolchain go.mod names from the Go module proxy).
go-check:
	@if command -v go >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Go not found: installing golang-go from Debian for the Go SDK tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null) \
	    || echo "WARNING: could not install Go; the Go SDK tests will be skipped"; \
	else echo "WARNING: go not found; the Go SDK tests will be skipped"; fi

# Download the modules and compile both test binaries once (Go's build cache keeps them).
go-deps: go-check
	@if command -v go >/dev/null 2>&1; then \
	  cd tests/go && go mod download && go test -count=1 -run '^$$' ./... >/dev/null && \
	  cd "$$(go list -m -f '{{.Dir}}' github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus)" && \
	  go mod download && go test -count=1 -run '^$$' . ./admin >/dev/null; fi

test-go: install go-deps netns-check
	@if command -v go >/dev/null 2>&1; then \
	  $(PY) tests/sdk_run.py --cwd tests/go -- go test -count=1 ./... && \
	  $(PY) tests/sdk_run.py --azure-ports -- $(PY) tests/go/live.py; \
	else echo "SKIPPED: Go SDK tests (tests/go): no Go on this machine"; fi

# The Java and Go suites one after the other (both compile: CPU-heavy on two cores).
test-sdks:
	@rc=0; $(MAKE) --no-print-directory test-java || rc=1; $(MAKE) --no-print-directory test-go || rc=1; exit $$rc

# The azure-servicebus sdist's own live tests, unchanged, against sbemu (docs/sdk-suite.md): the
# sdist pinned in tests/sdk_suite/sdist.txt is fetched into .venv/sdk-suite/ (pip checks its
# hash); SDK_SUITE_WORKERS pytest-xdist workers (the tests mostly sleep). It needs ports 5671 and
# 443 of 127.0.0.1 (the SDK's tests name no port). Prints pass / fail / not-applicable counts;
# results for compat-table in .venv/sdk-suite/results/.
SDK_SUITE_WORKERS ?= 12
test-sdk-suite: install netns-check
	SDK_SUITE_WORKERS=$(SDK_SUITE_WORKERS) tests/sdk_suite/run.sh

# docs/compatibility.md from the last test-sdk-suite run.
compat-table: install
	$(PY) tests/sdk_suite/compat_table.py

run: $(RUN_STAMP)
	@$(VENV)/bin/sbemu serve $(ARGS)

# make test runs make lint first: ruff, mypy and the import-layer contracts must pass.
# The suite mostly waits (lock expiry, receive timeouts, server start-ups), so pytest runs on
# TEST_WORKERS pytest-xdist processes, one test module per work unit (tests/conftest.py), with
# the JS suite, the Java and Go suites and the azure-servicebus sdist's suite alongside (their
# output follows pytest's). The CPU-heavy SERIAL_TESTS (Spark with its JVMs and standalone
# cluster, headless Chromium) run after that, in one process, so they do not starve for CPU next
# to the rest. TEST_WORKERS=0: everything in one process.
TEST_WORKERS ?= 4
SERIAL_TESTS ?= tests/spark tests/ui
test: install install-spark chromium-check disk-tools-check netns-check js-deps lint docs
	@js_log=$$(mktemp); sdk_log=$$(mktemp); suite_log=$$(mktemp); \
	$(MAKE) --no-print-directory test-js >"$$js_log" 2>&1 & js=$$!; \
	$(MAKE) --no-print-directory test-sdks >"$$sdk_log" 2>&1 & sdk=$$!; \
	$(MAKE) --no-print-directory test-sdk-suite >"$$suite_log" 2>&1 & suite=$$!; \
	if [ "$(TEST_WORKERS)" = 0 ]; then $(PY) -m pytest -q tests; py=$$?; serial=0; \
	else $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder \
	  $(addprefix --ignore=,$(SERIAL_TESTS)) tests; py=$$?; \
	  echo "---- $(SERIAL_TESTS): one process ----"; $(PY) -m pytest -q $(SERIAL_TESTS); serial=$$?; fi; \
	wait $$js; js_rc=$$?; \
	echo "---- JS SDK suite (tests/js, ran alongside pytest) ----"; cat "$$js_log"; rm -f "$$js_log"; \
	wait $$sdk; sdk_rc=$$?; \
	echo "---- Java and Go SDK suites (tests/java, tests/go, ran alongside pytest) ----"; \
	cat "$$sdk_log"; rm -f "$$sdk_log"; \
	wait $$suite; suite_rc=$$?; \
	echo "---- azure-servicebus sdist's own suite (tests/sdk_suite, ran alongside pytest) ----"; \
	cat "$$suite_log"; rm -f "$$suite_log"; \
	if [ $$py -ne 0 ] || [ $$serial -ne 0 ] || [ $$js_rc -ne 0 ] || [ $$sdk_rc -ne 0 ] \
	  || [ $$suite_rc -ne 0 ]; then \
	  echo "make test: pytest exit $$py, $(SERIAL_TESTS) exit $$serial, JS suite exit $$js_rc, Java/Go suites exit $$sdk_rc, azure-servicebus suite exit $$suite_rc"; \
	  exit 1; fi

# sbemu's OCI image sbemu:<version> (container/, docs/containers.md) and its tests (tests/container).
podman-check:
	@container/ensure-podman.sh
image: podman-check
	@container/build.sh >/dev/null
test-container: install podman-check
	$(PY) -m pytest -q tests/container $(ARGS)

# The docs site (mkdocs.yml) into build/site; --strict: a broken link or anchor fails the build.
docs: install
	$(VENV)/bin/mkdocs build --strict --quiet

lint: install
	$(VENV)/bin/ruff check src tests sparkjobs bench hardening
	$(VENV)/bin/ruff format --check src tests sparkjobs bench hardening
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

bench: install bench-node
	$(PY) bench/bench.py $(ARGS)

# Where the server's CPU goes per message (send, receive, settle; protocol, broker, commit,
# loop), in CPU us and callgrind instruction counts (docs/performance.md). ARGS="--queue benchp".
bench-profile: install valgrind-check
	$(PY) bench/hotpath.py $(ARGS)

valgrind-check:
	@if command -v valgrind >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 \
	  && test -f /usr/include/valgrind/callgrind.h; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind gcc >/dev/null); \
	else echo "bench-profile needs valgrind and a C compiler (apt-get install valgrind gcc)"; exit 1; fi

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

# A test fixture's round trip (durable vs --ephemeral) and the Python SDK's sync/async rates
# against sbemu and against the SDK's own ceiling (the in-memory forwarder): bench/sdk.py.
bench-sdk: install bench-node
	$(PY) bench/sdk.py $(ARGS)

# Apache ActiveMQ Artemis's binary distribution from Maven Central, checked against the pinned
# SHA-256 and unpacked into bench/artemis/apache-artemis (gitignored); it runs on the machine's Java.
ARTEMIS_VERSION := 2.40.0
ARTEMIS_SHA256 := 3add67e7b0af89f81eac1e6c577427b049b4e7502fb278c591838465d5ca93b5
ARTEMIS_TGZ := bench/artemis/apache-artemis-$(ARTEMIS_VERSION)-bin.tar.gz
bench/artemis/apache-artemis/bin/artemis:
	@mkdir -p bench/artemis
	curl -fsSL -o $(ARTEMIS_TGZ).part https://repo1.maven.org/maven2/org/apache/activemq/apache-artemis/$(ARTEMIS_VERSION)/apache-artemis-$(ARTEMIS_VERSION)-bin.tar.gz
	echo "$(ARTEMIS_SHA256)  $(ARTEMIS_TGZ).part" | sha256sum -c --quiet
	mv $(ARTEMIS_TGZ).part $(ARTEMIS_TGZ)
	rm -rf bench/artemis/apache-artemis && tar -xzf $(ARTEMIS_TGZ) -C bench/artemis
	mv bench/artemis/apache-artemis-$(ARTEMIS_VERSION) bench/artemis/apache-artemis && rm -f $(ARTEMIS_TGZ)

bench-artemis: java-check bench/artemis/apache-artemis/bin/artemis

# sbemu vs RabbitMQ 3.10 and ActiveMQ Artemis, the same rhea client, 5 alternating rounds.
bench-compare: install bench-node bench-rabbitmq bench-artemis
	$(PY) bench/compare.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache tests/js/node_modules

# spark: reporting tables from the partition logs into ./reports (ARGS=--follow keeps running);
# see sparkjobs/README.md
report: install-spark
	$(VENV)/bin/sbemu report --data-dir .sbemu --out reports $(ARGS)

# hardening (see docs/guarantees.md): long runs of the suites whose
# bounded parts run in `make test` (tests/fuzz, tests/crash, tests/load)
fuzz: install
	$(PY) -m hardening.fuzz $(ARGS)

crash-test: install
	$(PY) -m hardening.crash $(ARGS)

soak: install
	$(PY) -m hardening.soak $(ARGS)

load: install
	$(PY) -m hardening.load $(ARGS)
