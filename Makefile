# bertprep: `make demo` goes from the bundled demo books to a fine-tuned model; `make test` runs the test suite.
# Both create .venv and install bertprep into it first (torch pinned to the CPU build by constraints.txt).

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
DEMO   ?= demo-out
PYTEST_ARGS ?=

.PHONY: venv demo test test-fast lint docs bench clean

$(BIN)/bertprep: setup.cfg setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[train,finetune,dev,gcp,cloud,fast,bench,cjk,dask,tensorboard,wandb,recipes,megatron,retrieval]'
	# the mds extra: mosaicml-streaming without its pins of numpy<2.2 and transformers<5 (setup.cfg says why)
	$(BIN)/python -m pip install --quiet -c constraints.txt Brotli python-snappy zstd xxhash catalogue
	$(BIN)/python -m pip install --quiet -c constraints.txt --no-deps mosaicml-streaming
	touch $(BIN)/bertprep

venv: $(BIN)/bertprep

# From the bundled demo books (~460 KB of Project Gutenberg text) to a fine-tuned, exported model: build-vocab,
# make-shards with a held-out book, train a tiny model, fill-mask, continue all-MiniLM-L6-v2 (bench extra) on the
# same books and fill-mask with it, plot both runs, finetune on a book-classification task, export and check with
# transformers (demo/demo.py; DEMO_ARGS=--help). About 4 minutes on an idle 2-core machine (README, Install).
DEMO_ARGS ?=
demo: venv
	$(BIN)/python demo/demo.py --out $(DEMO) $(DEMO_ARGS)

# The whole test suite (tests that need ../shared/data skip, saying so, when it is absent). Two pytest workers
# with one torch thread each: two threads per worker on 2 cores oversubscribe and run torch tests ~2x slower.
# --durations=25 prints the slowest tests, so the next cut is measured. --no-loadscope-reorder: the files go out
# in the order tests/conftest.py gives them (the longest first), not by their number of tests.
test: venv lint
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

test-fast: venv lint
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow" --durations=25 $(PYTEST_ARGS)

# Lint and format check (ruff.toml; `$(BIN)/ruff format .` applies the format), then mypy over core/, pipeline/,
# bert_model/ and cli/ against the baseline's count of errors per module, which may only shrink
# (.ci/typecheck.py, .ci/mypy-baseline.txt): ~25 s of CPU the first time, a few seconds from its cache.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python .ci/typecheck.py

# The documentation site (MkDocs + Material; mkdocs.yml, docs/) into site/, failing on any warning.
docs: venv
	$(BIN)/mkdocs build --strict -d site

clean:
	rm -rf $(DEMO) site build *.egg-info .pytest_cache
