# rlguard: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo demo-logs test rules-test bench corpus clean

setup: $(STAMP)

# torch is pinned by constraints.txt to the CPU build on local disk (GPU users: drop -c).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,slack,trainer]'
	touch $(STAMP)

demo: setup
	@bash examples/demo_trainer.sh

demo-logs: setup
	@bash examples/demo.sh

test: setup
	$(PY) -m pytest -q
	$(VENV)/bin/rlguard rules test

rules-test: setup
	$(VENV)/bin/rlguard rules test

bench: setup
	$(PY) bench/check_speed.py
	$(PY) bench/corpus_eval.py
	$(PY) bench/trainer_vs_trl.py

corpus: setup
	$(PY) tests/corpus/generate.py tests/corpus/data

clean:
	rm -rf $(VENV) .pytest_cache build src/*.egg-info
