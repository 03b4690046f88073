#!/usr/bin/env bash
# Why topic F1 does not rise after WikiSpecter training: each row one change from the thesis's default, after each
# epoch, over several seeds (mean ± sample standard deviation, so a row's change can be told from noise), with the
# LinearSVC's chosen C and convergence and the vectors' geometry (reproduce/ablation.py). Same FOLDOC data and
# base as reproduce/wikispecter.sh; the evaluation documents are the same for every row (checked).
#
#   default      02 --hard 2 (SPECTER: 2 hard + 3 easy negatives per query), 03 margin 1, lr 3e-5, [CLS], 2 epochs
#   hard0/hard1  02 --hard 0 / 1 (all easy / one hard negative per query)
#   margin0.5/2  03 --margin 0.5 / 2
#   lr1e-5/1e-4  03 --lr 1e-5 / 1e-4
#   mean         03 --pooling mean (the base and the trained model embedded by mean pooling)
#   default-l2   the default's models, their vectors L2-normalised before the classifier (05 --normalize yes)
#
# 8 rows × 3 seeds × 2 epochs of 1,838 steps: about a day on 2 CPU cores, minutes a run on a GPU (in float32:
# ACCELERATE_MIXED_PRECISION=no). ROWS and SEEDS choose a part, e.g. ROWS="default hard0" SEEDS="1 2"; on a budget,
# DATA_FLAGS="... --train-queries 300" trains every row on the same seeded sample of 300 training queries (1,500
# triplets an epoch) with the same evaluation documents (docs/results.md's ablation was run so). Started again, it
# goes on where it stopped: data directories and finished trainings are kept (03 finds a finished run with the same
# settings done), so is the bases' finished evaluation; the rows' evaluations run again. Remove OUT to start afresh.
# Each seed's evaluation embeds the row's base too (base-cls, or base-mean for the mean row) and compares each epoch
# with it (05 --compare), so that a row's change from its start is a paired difference with its 95 % interval
# (reproduce/ablation.py prints them). NORMALISED=no leaves out the default row's L2-normalised models (default-l2);
# EPOCHS=last evaluates each seed's last epoch alone.
source "$(dirname "$0")/setup.sh" || exit 1
OUT=${OUT:-$WORK/ablation}
SEEDS=${SEEDS:-"1 2 3"}
ROWS=${ROWS:-"default hard0 hard1 margin0.5 margin2 lr1e-5 lr1e-4 mean"}
TRAIN=${TRAIN:-}  # more 03 flags for every run
NORMALISED=${NORMALISED:-yes}
EPOCHS=${EPOCHS:-all}
ARTICLES=${ARTICLES:-$WORK/foldoc/articles.jsonl}
DATA_FLAGS=${DATA_FLAGS:-"--crossref-queries 100 --topic-min 100 --topic-cap top=60"}  # 02's, as reproduce/wikispecter.sh
need_base
[ -f "$ARTICLES" ] || { bash reproduce/corpora.sh; \
    "$PY" 01_extract.py dictd --input corpora/foldoc/foldoc --out "$WORK/foldoc"; }

data_dir() {  # the data directory of 02 --hard $1, built once
    local dir="$OUT/data-hard$1"
    # shellcheck disable=SC2086
    [ -f "$dir/manifest.json" ] || "$PY" 02_build_graph.py --articles "$ARTICLES" --out "$dir" $DATA_FLAGS \
        --hard "$1" >&2
    echo "$dir"
}

EVAL_FLAGS=(--max-length 128 --task crossref topics --documents scored)
[ -f "$OUT/base/manifest.json" ] || "$PY" 05_evaluate.py --data "$(data_dir 2)" --out "$OUT/base" "${EVAL_FLAGS[@]}" \
    --model base-cls="$BASE" --pooling base-cls=cls --model base-mean="$BASE" --pooling base-mean=mean
for row in $ROWS; do
    hard=2 flags=() pooling=cls
    case "$row" in
        default) ;;
        hard0|hard1) hard=${row#hard} ;;
        margin*) flags=(--margin "${row#margin}") ;;
        lr*) flags=(--lr "${row#lr}") ;;
        mean) flags=(--pooling mean) pooling=mean ;;
        *) echo "unknown row $row" >&2; exit 2 ;;
    esac
    data=$(data_dir "$hard")
    for part in crossref.qrels topics.top.train.jsonl topics.top.test.jsonl; do
        cmp -s "$data/$part" "$(data_dir 2)/$part" || { echo "$data/$part differs from --hard 2's" >&2; exit 1; }
    done
    # shellcheck disable=SC2086
    "$PY" 03_train.py --objective triplet --data "$data" --model "$BASE" --out "$OUT/$row" --seeds $SEEDS \
        --save-epochs --checkpoint-every 0 "${flags[@]}" $TRAIN
    for seed in $SEEDS; do
        models=(--model "base-$pooling=$BASE" --pooling "base-$pooling=$pooling")
        mapfile -t epoch_dirs < <(printf '%s\n' "$OUT/$row/seed_$seed"/epoch_* | sort -V)
        [ "$EPOCHS" = last ] && epoch_dirs=("${epoch_dirs[-1]}")
        for epoch_dir in "${epoch_dirs[@]}"; do
            models+=(--model "${epoch_dir##*/}=$epoch_dir" --compare "${epoch_dir##*/}=base-$pooling")
            if [ "$row" = default ] && [ "$NORMALISED" = yes ]; then
                models+=(--model "${epoch_dir##*/}-l2=$epoch_dir" --normalize "${epoch_dir##*/}-l2=yes")
            fi
        done
        "$PY" 05_evaluate.py --data "$data" --out "$OUT/$row/seed_$seed/eval" --overwrite "${EVAL_FLAGS[@]}" \
            "${models[@]}"
    done
done
# shellcheck disable=SC2086
"$PY" reproduce/ablation.py --data "$(data_dir 2)" --base "$OUT/base" --out "$OUT" --rows $ROWS | tee "$OUT/ablation.md"
