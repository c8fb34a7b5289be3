# sbemu: every target bootstraps what it needs (virtual environment, pip install from pyproject.toml).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
SPARK_STAMP := $(VENV)/.installed-spark
ARGS ?=

.PHONY: docs install install-spark java-check chromium-check disk-tools-check netns-check node-check js-deps test-js maven-check java-deps test-java go-check go-deps test-go dapr-deps test-dapr test-sdks test-sdk-suite test-sdk-suite-alone compat-table run test lint bench bench-renewals bench-profile valgrind-check bench-compare bench-node bench-node-tool bench-rabbitmq bench-artemis bench-sdk report clean fuzz crash-test soak load loop-hold image podman-check test-container bench-container

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

# One rule for every tool a target needs from the machine: when TOOL_CHECK (a shell test) fails,
# install the Debian TOOL_PACKAGES if we are root and have apt-get, else say what is missing.
# By default a missing tool only skips some tests (TOOL_SKIPS; TOOL_NAME and TOOL_ABSENT name it
# in the warnings); a bench sets TOOL_ON_FAILURE / TOOL_ON_ABSENT to stop instead. Each tool's
# settings are target-specific variables next to the target that explains why it is needed.
TOOLS := java-check chromium-check disk-tools-check netns-check node-check maven-check go-check \
  valgrind-check bench-node-tool bench-rabbitmq
TOOL_ON_FAILURE = echo "WARNING: could not install $(TOOL_NAME); $(TOOL_SKIPS) will be skipped"
TOOL_ON_ABSENT = echo "WARNING: $(TOOL_ABSENT) not found; $(TOOL_SKIPS) will be skipped"
$(TOOLS):
	@if $(TOOL_CHECK); then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  $(if $(TOOL_INSTALLING),echo "$(TOOL_INSTALLING)";) \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(TOOL_PACKAGES) >/dev/null) \
	    || { $(TOOL_ON_FAILURE); }; \
	else $(TOOL_ON_ABSENT); fi

# Spark needs Java 17+: use the machine's, else install Debian's headless JRE when we can.
java-check: TOOL_CHECK = java -version >/dev/null 2>&1
java-check: TOOL_PACKAGES = openjdk-17-jre-headless
java-check: TOOL_INSTALLING = Java not found: installing openjdk-17-jre-headless for Spark
java-check: TOOL_NAME = Java
java-check: TOOL_ABSENT = Java 17+
java-check: TOOL_SKIPS = the Spark tests

# The dashboard's browser tests drive Debian's Chromium through its chromedriver (no browser
# download at test time): install both when missing and we are root, else the tests skip.
# certutil (libnss3-tools) trusts sbemu's CA in Chromium's NSS database for the page that runs
# the JS SDK over wss (tests/ui/test_browser_sdk.py), as mkcert -install does for a developer.
chromium-check: TOOL_CHECK = command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 \
    && command -v certutil >/dev/null 2>&1
chromium-check: TOOL_PACKAGES = chromium chromium-driver libnss3-tools
chromium-check: TOOL_INSTALLING = Chromium or certutil not found: installing chromium, chromium-driver and libnss3-tools for the browser tests
chromium-check: TOOL_NAME = Chromium
chromium-check: TOOL_ABSENT = chromium/chromedriver/certutil
chromium-check: TOOL_SKIPS = the browser tests

# The disk-fault tests (tests/faults/test_disk_faults.py) put a small ext4 on a loop device:
# mkfs.ext4 and e2fsck come from Debian's e2fsprogs (losetup, mount and fsfreeze from
# util-linux, always there). Installed when missing and we are root, else those tests skip.
disk-tools-check: TOOL_CHECK = command -v mkfs.ext4 >/dev/null 2>&1 && command -v e2fsck >/dev/null 2>&1
disk-tools-check: TOOL_PACKAGES = e2fsprogs
disk-tools-check: TOOL_INSTALLING = e2fsprogs not found: installing it for the disk-fault tests
disk-tools-check: TOOL_NAME = e2fsprogs
disk-tools-check: TOOL_ABSENT = mkfs.ext4/e2fsck
disk-tools-check: TOOL_SKIPS = the disk-fault tests

# The admin-port access test (tests/security/test_admin_policy.py) reaches the server from a
# network namespace (`ip netns`, iproute2): installed when missing and we are root, else it skips.
netns-check: TOOL_CHECK = command -v ip >/dev/null 2>&1
netns-check: TOOL_PACKAGES = iproute2
netns-check: TOOL_INSTALLING = ip not found: installing iproute2 for the admin-port access test
netns-check: TOOL_NAME = iproute2
netns-check: TOOL_ABSENT = ip (iproute2)
netns-check: TOOL_SKIPS = the network-namespace test

# pyspark ships as a large source archive that pip builds once (about a minute; pip caches it).
$(SPARK_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,dev,docs,spark]'
	@touch $(SPARK_STAMP)

install-spark: $(SPARK_STAMP) java-check
	@$(PY) -m sparkjobs.cds >/dev/null 2>&1 || echo "WARNING: no class-data-sharing archive for the local Spark driver (slower warm-up)"

# The JS SDK suite (tests/js) needs Node 18+ and npm: use the machine's, else Debian's when root.
node-check: TOOL_CHECK = command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1
node-check: TOOL_PACKAGES = nodejs npm
node-check: TOOL_INSTALLING = Node.js not found: installing nodejs and npm from Debian for the JS SDK tests
node-check: TOOL_NAME = Node.js
node-check: TOOL_ABSENT = Node.js/npm
node-check: TOOL_SKIPS = the JS SDK tests

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
maven-check: TOOL_CHECK = command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1
maven-check: TOOL_PACKAGES = maven openjdk-17-jdk-headless
maven-check: TOOL_INSTALLING = Maven/JDK not found: installing maven and openjdk-17-jdk-headless for the Java SDK tests
maven-check: TOOL_NAME = Maven
maven-check: TOOL_ABSENT = mvn/javac
maven-check: TOOL_SKIPS = the Java SDK tests

tests/java/.m2repo/.resolved: tests/java/pom.xml
	$(MVN) -q test-compile
	@touch $@

java-deps: maven-check
	@if command -v mvn >/dev/null 2>&1; then $(MAKE) --no-print-directory tests/java/.m2repo/.resolved; fi

# JUnit against a real sbemu that tests/sdk_run.py starts for the run (connection strings and
# the trust store for the admin client's HTTPS in the environment); then the 100 MB messages
# (LargeMessagesTest, tag "premium") against a Premium server of their own; then the admin
# client with the application's own strings on Azure's ports (ApplicationStringsTest, tag
# "azure-ports": the Java admin client always calls 443), in sdk_run's network namespace,
# offline (-o: no network there; the first run resolved every plugin).
test-java: install java-deps
	@if command -v mvn >/dev/null 2>&1; then \
	  $(PY) tests/sdk_run.py -- $(MVN) test && \
	  $(PY) tests/sdk_run.py --premium -- $(MVN) test -Dsbemu.groups=premium -Dsbemu.excludedGroups=none && \
	  $(PY) tests/sdk_run.py --azure-ports -- $(MVN) -o test -Dsbemu.groups=azure-ports -Dsbemu.excludedGroups=none; \
	else echo "SKIPPED: Java SDK tests (tests/java): no Maven on this machine"; fi

# The Go SDK suite (tests/go: azservicebus and its admin package, pinned by go.sum) and the
# module's own live tests, run from the module cache unchanged (tests/go/live.py, with the
# not-applicable list tests/go/not-applicable.txt). Go from the machine, else Debian's (when
# root; its go command fetches the toolchain go.mod names from the Go module proxy).
go-check: TOOL_CHECK = command -v go >/dev/null 2>&1
go-check: TOOL_PACKAGES = golang-go
go-check: TOOL_INSTALLING = Go not found: installing golang-go from Debian for the Go SDK tests
go-check: TOOL_NAME = Go
go-check: TOOL_ABSENT = go
go-check: TOOL_SKIPS = the Go SDK tests

# Download the modules and compile both test binaries once (Go's build cache keeps them).
go-deps: go-check
	@if command -v go >/dev/null 2>&1; then \
	  cd tests/go && go mod download && go test -count=1 -run '^$$' ./... >/dev/null && \
	  cd "$$(go list -m -f '{{.Dir}}' github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus)" && \
	  go mod download && go test -count=1 -run '^$$' . ./admin >/dev/null; fi

test-go: install go-deps netns-check
	@if command -v go >/dev/null 2>&1; then \
	  $(PY) tests/sdk_run.py --cwd tests/go -- go test -count=1 ./... && \
	  $(PY) tests/sdk_run.py --azure-ports -- sh -c \
	    '(cd tests/go && go test -count=1 -run "^TestAdminClientWithTheApplicationsStrings$$" .) && "$$0" tests/go/live.py' $(PY); \
	else echo "SKIPPED: Go SDK tests (tests/go): no Go on this machine"; fi

# Dapr's Azure Service Bus pub/sub components (github.com/dapr/components-contrib, pinned by
# tests/dapr/go.sum) with entity management on, unchanged, against a real sbemu: the printed
# connection string for both their AMQP and admin clients. The first build compiles about 150
# modules (2 min 40 s on two loaded cores); Go's build cache keeps it.
dapr-deps: go-check
	@if command -v go >/dev/null 2>&1; then \
	  cd tests/dapr && go mod download && go test -count=1 -run '^$$' . >/dev/null; fi

test-dapr: install dapr-deps
	@if command -v go >/dev/null 2>&1; then \
	  $(PY) tests/sdk_run.py --cwd tests/dapr -- go test -count=1 .; \
	else echo "SKIPPED: Dapr pub/sub tests (tests/dapr): no Go on this machine"; fi

# The Java, Go and Dapr suites one after the other (all compile: CPU-heavy on two cores).
test-sdks:
	@rc=0; $(MAKE) --no-print-directory test-java || rc=1; $(MAKE) --no-print-directory test-go || rc=1; \
	$(MAKE) --no-print-directory test-dapr || rc=1; exit $$rc

# The azure-servicebus sdist's own live tests, unchanged, against sbemu (docs/sdk-suite.md): the
# sdist pinned in tests/sdk_suite/sdist.txt is fetched into .venv/sdk-suite/ (pip checks its
# hash); SDK_SUITE_WORKERS pytest-xdist workers (the tests mostly sleep). It needs ports 5671 and
# 443 of 127.0.0.1 (the SDK's tests name no port). Prints pass / fail / not-applicable counts;
# results for compat-table in .venv/sdk-suite/results/.
SDK_SUITE_WORKERS ?= 12
test-sdk-suite: install netns-check
	SDK_SUITE_WORKERS=$(SDK_SUITE_WORKERS) tests/sdk_suite/run.sh
# its tests with a real deadline in the SDK's threads (tests/sdk_suite/alone.txt), alone
test-sdk-suite-alone: install netns-check
	tests/sdk_suite/run.sh --alone

# docs/compatibility.md from the last test-sdk-suite run.
compat-table: install
	$(PY) tests/sdk_suite/compat_table.py

run: $(RUN_STAMP)
	@$(VENV)/bin/sbemu serve $(ARGS)

# make test runs make lint first: ruff, mypy and the import-layer contracts must pass; then
# tests/run_all.sh (pytest on TEST_WORKERS processes with the JS, Java, Go and sdist suites
# alongside, then the CPU-heavy SERIAL_TESTS in one process; TEST_WORKERS=0: one process).
TEST_WORKERS ?= 4
SERIAL_TESTS ?= tests/spark tests/ui
test: install install-spark chromium-check disk-tools-check netns-check podman-check js-deps lint docs
	@PY=$(PY) MAKE="$(MAKE)" TEST_WORKERS=$(TEST_WORKERS) SERIAL_TESTS="$(SERIAL_TESTS)" tests/run_all.sh

# sbemu's OCI image sbemu:<version> (container/, docs/containers.md) and its tests (tests/container).
podman-check:
	@container/ensure-podman.sh
image: podman-check
	@container/build.sh >/dev/null
test-container: install podman-check
	$(PY) -m pytest -q tests/container $(ARGS)
# podman run to /health 200, median of 5 rounds; fails past 2 s: run it on a quiet machine
bench-container: install podman-check
	$(PY) bench/container_start.py $(ARGS)

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

# Lock renewals per second through the sync Python SDK, one thread and five (bench/renewals.py).
bench-renewals: install
	$(PY) bench/renewals.py $(ARGS)

# Where the server's CPU goes per message (send, receive, settle; protocol, broker, commit,
# loop), in CPU us and callgrind instruction counts (docs/performance.md). ARGS="--queue benchp".
bench-profile: install valgrind-check
	$(PY) bench/hotpath.py $(ARGS)

valgrind-check: TOOL_CHECK = command -v valgrind >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 \
    && test -f /usr/include/valgrind/callgrind.h
valgrind-check: TOOL_PACKAGES = valgrind gcc
valgrind-check: TOOL_ON_FAILURE = exit 1
valgrind-check: TOOL_ON_ABSENT = echo "bench-profile needs valgrind and a C compiler (apt-get install valgrind gcc)"; exit 1

# rhea (npm, pinned by bench/node/package-lock.json) for the latency phase and bench-compare.
bench-node-tool: TOOL_CHECK = command -v node >/dev/null 2>&1
bench-node-tool: TOOL_PACKAGES = nodejs npm
bench-node-tool: TOOL_ON_FAILURE = exit 1
bench-node-tool: TOOL_ON_ABSENT = echo "the latency bench needs Node.js"; exit 1
bench-node: bench-node-tool
	@test -d bench/node/node_modules/rhea || (cd bench/node && npm ci --no-audit --no-fund --silent)

# sbemu vs Debian's RabbitMQ 3.10 (AMQP 1.0 plugin), same rhea client, alternating rounds;
# installs rabbitmq-server (apt, as root) when absent. bench/compare.py runs its own node.
bench-rabbitmq: TOOL_CHECK = test -x /usr/lib/rabbitmq/bin/rabbitmq-server
bench-rabbitmq: TOOL_PACKAGES = rabbitmq-server
bench-rabbitmq: TOOL_INSTALLING = installing rabbitmq-server from Debian
bench-rabbitmq: TOOL_ON_FAILURE = exit 1
bench-rabbitmq: TOOL_ON_ABSENT = echo "bench-compare needs rabbitmq-server (apt-get install as root)"; exit 1

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

# the longest one request holds the event loop (a 4,500-message batch, a 99 MB message);
# fails past 50 ms: run it on a quiet machine (hardening/loophold.py)
loop-hold: install
	$(PY) -m hardening.loophold $(ARGS)
