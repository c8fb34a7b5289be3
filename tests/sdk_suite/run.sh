#!/bin/sh
# The azure-servicebus sdist's live tests against sbemu (make test-sdk-suite).
# Usage: tests/sdk_suite/run.sh [pytest args...]; SDK_SUITE_WORKERS (default 6) xdist workers,
# results in .venv/sdk-suite/results/ (junit.xml, not-applicable.json) for `make compat-table`.
set -e
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py="$repo/.venv/bin/python"
tests=$("$py" "$here/fetch.py" "$repo/.venv/sdk-suite")
results="$repo/.venv/sdk-suite/results"
mkdir -p "$results"
cd "$tests"
# the live tests of the brief (issue 23); the sdist's offline unit tests are not ours to run
[ $# -gt 0 ] || set -- test_queues.py test_sessions.py test_sb_client.py test_message.py \
  test_topic.py test_subscriptions.py test_list_sessions.py async_tests mgmt_tests
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m pytest -c "$here/pytest.ini" \
  --rootdir "$tests" -q -n "${SDK_SUITE_WORKERS:-6}" --dist load \
  --junitxml "$results/junit.xml" --sdk-suite-na-json "$results/not-applicable.json" \
  "$@"
