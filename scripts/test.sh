#!/usr/bin/env bash
# Installs everything the tests need (venv, packages, Debian's chromium) and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# --durations: the slowest tests, so that what outgrows the CI budget is seen (it belongs in bench/)
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 tests "$@"
