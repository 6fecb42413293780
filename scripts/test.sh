#!/usr/bin/env bash
# Installs everything the tests need (venv, packages, Debian's chromium) and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# The unit tests in two processes (no training process, no browser: nothing they time shares the cores); the
# tests that start runs and pages one at a time, as their waits were measured (two at once made some of them miss
# their deadlines on 2 cores). --durations: the slowest tests, so that what outgrows the CI budget is seen (it
# belongs in bench/). Those tests wait on processes and pages on a shared 2-core machine: one that fails gets one more
# try, and every rerun is listed at the end (RERUN lines), so a flaky test is seen and mended, not hidden.
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 -m unit tests "$@" || status=$?
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 --reruns 1 --reruns-delay 5 -rR -m "not unit" tests "$@" || status=$?
exit "$status"
