#!/usr/bin/env bash
# The GPU check, as one command for a GPU machine with no network (run bench/gpu_wheels.sh here first, then
# carry .gpu): installs the carried wheels into /tmp/site and runs bench/gpu_check.py; its table and figures go
# to $OUT (or out/gpu_check). Arguments go to gpu_check.py (e.g. --shape 135m --cases sft-liger,dpo).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export OUT=${OUT:-$PWD/out/gpu_check}
mkdir -p "$OUT"
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/wheels/*.whl \
  || { echo "gpu_check: the carried wheels did not install"; exit 2; }
$PY -m zipfile -e .gpu/bitsandbytes-cuda130.zip /tmp/site  # no unzip there
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
$PY bench/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
