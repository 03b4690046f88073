#!/usr/bin/env bash
# The GPU benchmark (bench/gpu.py: every row beside sentence-transformers / transformers' Trainer in bf16, the
# distillation student at 4,096 tokens, the papers' runs projected) in one command, from the project root:
#     bash bench/gpu.sh          # on a GPU machine
#     bash bench/gpu.sh --dry    # anywhere, CPU too: tiny models and sizes, every row end to end
# On a machine without the network, wheels put in .whl/ beforehand (pip download of what its Python lacks) are
# installed into /tmp/site first. With OUT set to a folder, the table and bench/results.md are also copied there.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then PY=${PY:-.venv/bin/python}; else PY=${PY:-python3}; fi
if [[ " $* " != *" --dry "* ]] && [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
"$PY" bench/gpu.py "$@"
if [ -n "${OUT:-}" ]; then
  if [[ " $* " == *" --dry "* ]]; then cp bench/out/gpu-dry/results.md "$OUT/gpu-table.md"
  else cp bench/out/gpu/results.md "$OUT/gpu-table.md" && cp bench/results.md "$OUT/results.md"; fi
fi
