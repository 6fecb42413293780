#!/usr/bin/env bash
# Installs everything the tests need (venv, packages, Debian's chromium) and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# --durations: the slowest tests, so that what outgrows the CI budget is seen (it belongs in bench/).
# Two processes, a file each at a time (a file's module fixtures are built once): most of the suite's time is
# spent waiting on runs and pages, not computing.
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 -n 2 --dist loadfile tests "$@"
