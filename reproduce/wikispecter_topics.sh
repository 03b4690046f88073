#!/usr/bin/env bash
# Where WikiSpecter-trained models lose topic F1, measured on FOLDOC after reproduce/wikispecter.sh. From
# all-MiniLM-L6-v2, a model already trained for sentence similarity (mean pooling), the thesis's triplets at each
# learning rate of LRS for EPOCHS epochs, with crossref MAP and topic F1 after each epoch; the published MiniLM as it
# is (normalised) and unnormalised, and the last trained model normalised, so that normalisation can be told apart
# from training; and the share of links whose two ends share a topic label. The default (two learning rates, the
# thesis's 3e-5 and a third of it, 2 epochs each) takes about 1.5 hours on 2 CPU cores; LRS=3e-5 EPOCHS=1 about 35
# minutes.
source "$(dirname "$0")/setup.sh" || exit 1
LRS=${LRS:-"3e-5 1e-5"}
EPOCHS=${EPOCHS:-2}
MINILM=$(minilm)
[ -f "$WORK/foldoc-data/manifest.json" ] || bash reproduce/wikispecter.sh

MODELS=(--model minilm="$MINILM" --model minilm-raw="$MINILM" --normalize minilm-raw=no)
ROWS=(minilm minilm-raw)
for lr in $LRS; do
    "$PY" 03_train.py --objective triplet --data "$WORK/foldoc-data" --model "$MINILM" --pooling mean --lr "$lr" \
        --epochs "$EPOCHS" --out "$WORK/wikispecter-minilm-$lr" --overwrite --save-epochs --checkpoint-every 0
    for epoch in $(seq 1 "$EPOCHS"); do
        MODELS+=(--model "lr$lr-epoch$epoch=$WORK/wikispecter-minilm-$lr/epoch_$epoch")
        ROWS+=("lr$lr-epoch$epoch")
    done
    MODELS+=(--model "lr$lr-epoch$EPOCHS-norm=$WORK/wikispecter-minilm-$lr/epoch_$EPOCHS"
             --normalize "lr$lr-epoch$EPOCHS-norm=yes")
    ROWS+=("lr$lr-epoch$EPOCHS-norm")
done
"$PY" 05_evaluate.py --data "$WORK/foldoc-data" --out "$WORK/wikispecter-topics-eval" --overwrite --max-length 128 \
    --task crossref topics "${MODELS[@]}"
"$PY" reproduce/compare.py wikispecter "$WORK/wikispecter-topics-eval/metrics.json" --row "${ROWS[@]}" \
    | tee "$WORK/wikispecter-topics.md"
"$PY" reproduce/label_links.py "$WORK/foldoc/articles.jsonl" "$WORK/foldoc-data" | tee -a "$WORK/wikispecter-topics.md"
