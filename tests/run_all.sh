#!/bin/sh
# The whole suite, as `make test` runs it (after its install, lint and docs prerequisites).
#
# The suite mostly waits (lock expiry, receive timeouts, server start-ups), so pytest runs on
# TEST_WORKERS pytest-xdist processes, one test module per work unit (tests/conftest.py), with
# the JS suite, the Java and Go suites and the azure-servicebus sdist's suite alongside (their
# output follows pytest's). The CPU-heavy SERIAL_TESTS (Spark with its JVMs and standalone
# cluster, headless Chromium) run after that, in one process, so they do not starve for CPU next
# to the rest. Last, on a machine left to them, the sdist's tests that hold a real deadline in
# the SDK's own threads (tests/sdk_suite/alone.txt). TEST_WORKERS=0: everything in one process.
#
# Environment (the Makefile sets them): PY (the virtual environment's python), MAKE,
# TEST_WORKERS (default 4), SERIAL_TESTS (default "tests/spark tests/ui").
PY=${PY:-.venv/bin/python}
MAKE=${MAKE:-make}
TEST_WORKERS=${TEST_WORKERS:-4}
SERIAL_TESTS=${SERIAL_TESTS:-tests/spark tests/ui}

js_log=$(mktemp); sdk_log=$(mktemp); suite_log=$(mktemp)
$MAKE --no-print-directory test-js >"$js_log" 2>&1 & js=$!
$MAKE --no-print-directory test-sdks >"$sdk_log" 2>&1 & sdk=$!
$MAKE --no-print-directory test-sdk-suite >"$suite_log" 2>&1 & suite=$!

if [ "$TEST_WORKERS" = 0 ]; then
  $PY -m pytest -q tests; py=$?; serial=0
else
  ignores=""
  for t in $SERIAL_TESTS; do ignores="$ignores --ignore=$t"; done
  # shellcheck disable=SC2086  # word splitting of the ignore options is meant
  $PY -m pytest -q -n "$TEST_WORKERS" --dist loadgroup --no-loadscope-reorder $ignores tests; py=$?
  echo "---- $SERIAL_TESTS: one process ----"
  # shellcheck disable=SC2086
  $PY -m pytest -q $SERIAL_TESTS; serial=$?
fi

wait $js; js_rc=$?
echo "---- JS SDK suite (tests/js, ran alongside pytest) ----"; cat "$js_log"; rm -f "$js_log"
wait $sdk; sdk_rc=$?
echo "---- Java and Go SDK suites (tests/java, tests/go, ran alongside pytest) ----"
cat "$sdk_log"; rm -f "$sdk_log"
wait $suite; suite_rc=$?
echo "---- azure-servicebus sdist's own suite (tests/sdk_suite, ran alongside pytest) ----"
cat "$suite_log"; rm -f "$suite_log"

echo "---- azure-servicebus sdist's tests with a deadline in the SDK's threads, alone ----"
$MAKE --no-print-directory test-sdk-suite-alone; alone_rc=$?

if [ $py -ne 0 ] || [ $serial -ne 0 ] || [ $js_rc -ne 0 ] || [ $sdk_rc -ne 0 ] \
  || [ $suite_rc -ne 0 ] || [ $alone_rc -ne 0 ]; then
  echo "make test: pytest exit $py, $SERIAL_TESTS exit $serial, JS suite exit $js_rc, Java/Go suites exit $sdk_rc, azure-servicebus suite exit $suite_rc, alone $alone_rc"
  exit 1
fi
