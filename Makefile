# make demo — set up .venv and run 01 → 05 on the embedded sample; make test — the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Nothing here may reach the Hugging Face hub: models come from local folders only.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo demo-keysent test bench-deps clean

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt
	touch $(STAMP)

demo: $(STAMP)
	$(PY) demo.py --out demo

demo-keysent: $(STAMP)
	$(PY) demo.py --keysent --out demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

bench-deps: $(STAMP)
	$(PY) -m pip install -q -r bench/requirements.txt

clean:
	rm -rf demo bench/out
