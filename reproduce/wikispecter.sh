#!/usr/bin/env bash
# WikiSpecter (the thesis: SPECTER's triplet loss on Wikipedia's link graph, from FinBERT) reproduced on FOLDOC, the
# closest offline stand-in for a Wikipedia: 9,297 computing entries, their {cross-references} as links and their
# <category> tags as topic labels. Evaluation documents are held out of training (02's default, the thesis's protocol).
# The rows of the thesis's Tables 5.1 and 5.3: the base with [CLS] and with mean pooling, a Sentence-BERT
# (all-MiniLM-L6-v2), the lexical baseline and the trained model; every model reads 128 tokens. About 45 minutes on
# 2 CPU cores after reproduce/pretrain.sh. The base is the MLM-only one (BASE=work/bert-mini/model); from the MLM + NSP
# base, as FinBERT was pretrained: BASE=work/bert-mini-nsp/model WORK=work/nsp (WORK keeps the two runs apart).
#
# Relaxed for the corpus's size (FOLDOC is 1 % of a Wikipedia, and held-out evaluation documents take their links
# with them): 100 cross-reference queries (SciDocs: 1,000), each still with 5 linked and 25 random candidates; topic
# labels with at least 100 documents (the thesis: 10), at most 60 of them each (the thesis: 300).
source "$(dirname "$0")/setup.sh" || exit 1
MINILM=$(minilm)
need_base

bash reproduce/corpora.sh
"$PY" 01_extract.py dictd --input corpora/foldoc/foldoc --out "$WORK/foldoc" --overwrite
"$PY" 02_build_graph.py --articles "$WORK/foldoc/articles.jsonl" --out "$WORK/foldoc-data" --overwrite \
    --crossref-queries 100 --topic-min 100 --topic-cap top=60
echo "== 03: the thesis's training from $BASE: [CLS], 128 tokens, margin 1, lr 3e-5, batch 16, 2 epochs"
"$PY" 03_train.py --objective triplet --data "$WORK/foldoc-data" --model "$BASE" --out "$WORK/wikispecter" --overwrite \
    --save-epochs --checkpoint-every 0
"$PY" 05_evaluate.py --data "$WORK/foldoc-data" --out "$WORK/wikispecter-eval" --overwrite --max-length 128 \
    --model base-cls="$BASE" --pooling base-cls=cls --model base-mean="$BASE" --pooling base-mean=mean \
    --model sbert="$MINILM" --model wikispecter-epoch1="$WORK/wikispecter/epoch_1" \
    --model wikispecter="$WORK/wikispecter/model" --compare wikispecter=base-cls --compare wikispecter=base-mean
"$PY" reproduce/compare.py wikispecter "$WORK/wikispecter-eval/metrics.json" --row base-cls=FinBERT base-mean \
    sbert=Sentence-BERT lexical wikispecter-epoch1 wikispecter=WikiSpecter | tee "$WORK/wikispecter.md"

