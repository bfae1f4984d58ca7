# segperf: every target sets itself up; `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The pinned torch is installed before the project: a plain `torch` requirement with nothing
# installed would pull a multi-GB CUDA build. On a GPU machine pick the build you need, e.g.
#   make setup TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.segperf-installed

export NO_ALBUMENTATIONS_UPDATE := 1

.PHONY: setup demo test test-fast lint tensorboard clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(firstword $(TORCH))" $(wordlist 2,99,$(TORCH))
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

demo: setup  ## the main job: a baseline training run on the built-in data
	$(BIN)/python -m segperf.train

test: setup  ## the whole suite, slow tests included (what CI runs)
	$(BIN)/python -m pytest

test-fast: setup  ## only the fast tests
	$(BIN)/python -m pytest -m "not slow"

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

tensorboard: setup
	$(BIN)/tensorboard --logdir outputs

clean:
	rm -rf outputs lightning_logs .pytest_cache .ruff_cache
	find multirun -mindepth 1 ! -name README.md -prune -exec rm -rf {} +
