#!/bin/sh
# The azure-servicebus sdist's live tests against sbemu (make test-sdk-suite).
# Usage: tests/sdk_suite/run.sh [pytest args...] (--show-capture=all shows the SDK's logs);
# tests/sdk_suite/run.sh --alone: only the tests of alone.txt, in one process (make test runs
# them after everything else; the full run leaves them out);
# SDK_SUITE_WORKERS (default 12) xdist workers; results in .venv/sdk-suite/results/
# (junit.xml, not-applicable.json) for `make compat-table`.
set -e
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py="$repo/.venv/bin/python"
tests=$("$py" "$here/fetch.py" "$repo/.venv/sdk-suite")
results="$repo/.venv/sdk-suite/results"
mkdir -p "$results"
cd "$tests"
# The live tests of issue 23 (the sdist's offline unit tests are not ours to run), unless the
# first argument names tests itself: run.sh test_queues.py -k peek; run.sh -x (all, options).
workers=${SDK_SUITE_WORKERS:-12}
junit="$results/junit.xml"
na_json="$results/not-applicable.json"
alone=all
if [ "${1:-}" = --alone ]; then
  shift; alone=only; workers=0
  junit="$results/junit-alone.xml"; na_json="$results/not-applicable-alone.json"
fi
case "${1:-}" in
  ""|-*) [ "$alone" = all ] && alone=exclude
    set -- test_queues.py test_sessions.py test_sb_client.py test_message.py \
    test_topic.py test_subscriptions.py test_list_sessions.py async_tests mgmt_tests "$@" ;;
esac
# The SDK's tests name no port (AMQPS 5671, WebSockets 443): as root, the run gets a network
# namespace of its own (loopback only, as tests/sdk_run.py --azure-ports), so it can bind them
# beside any other run on the machine; elsewhere it uses the machine's loopback.
netns=""
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 \
  && unshare --net true 2>/dev/null; then
  netns="unshare --net sh -c 'ip link set lo up && exec \"\$@\"' sh"
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
eval exec $netns '"$py"' -m pytest -c '"$here/sdk_suite.ini"' --rootdir '"$tests"' -q --tb=short \
  --show-capture=no -n '"$workers"' --dist load --sdk-suite-alone '"$alone"' \
  --junitxml '"$junit"' --sdk-suite-na-json '"$na_json"' '"$@"'
