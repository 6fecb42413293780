#!/usr/bin/env bash
# Fills .gpu/ (ignored by git, carried to a GPU machine that has no network) with what bench/gpu_check.sh needs
# there beyond its own torch / transformers / peft / accelerate: the project's pure-Python dependencies and the
# GPU extras as Python 3.12 wheels, and the embedded model's tokenizer files. Run here, once, before the GPU call.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
rm -rf .gpu && mkdir -p .gpu/wheels .gpu/tokenizer
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
# the same versions as requirements.txt (huggingface_hub is left to the machine's: 2.x needs httpx2, absent there); liger-kernel and bitsandbytes are the GPU settings' extras
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .gpu/wheels \
  trl==1.16.0 transformers==5.24.0 peft==0.21.2 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  liger-kernel==0.8.5 bitsandbytes==0.50.2
# bitsandbytes ships a library per CUDA version (130 MB unpacked): keep CUDA 13's alone, as a plain zip to unpack
bnb=$(ls .gpu/wheels/bitsandbytes-*.whl)
tmp=$(mktemp -d)
(cd "$tmp" && unzip -q "$OLDPWD/$bnb" && find bitsandbytes -name 'libbitsandbytes_*.so' ! -name '*cuda130*' -delete \
  && zip -qr "$OLDPWD/.gpu/bitsandbytes-cuda130.zip" .)
rm -rf "$tmp" "$bnb"
model=$($PY -c "from backend.models import resolve_model; print(resolve_model('smollm2-135m-instruct'))")
cp "$model"/tokenizer* "$model"/chat_template.jinja .gpu/tokenizer/ 2>/dev/null || cp "$model"/tokenizer* .gpu/tokenizer/
du -sh .gpu
