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

# the seed study's cumulative ladder: each step adds one optimization to the previous ones
LADDER      := 0_baseline,1_prefetch,2_workers,3_pin,4_deconv,5_channels_last,6_compile,7_bf16
LADDER_ARGS ?=
# Hydra overrides of `python -m segperf.bench data` (conf/bench.yaml), e.g. BENCH_ARGS="'data.num_workers=[0,2,4]'"
BENCH_ARGS  ?=
LADDER_DIR  ?= multirun/$(shell date +%Y-%m-%d)/ladder-$(shell date +%H-%M-%S)
# the CPU study of the second seed: MNIST CNN, batch size x DataLoader workers, built-in digits;
# repeats run as whole passes over the grid (repeat first), so slow drift in machine load spreads evenly
CPU_STUDY_ARGS    ?=
CPU_STUDY_REPEATS ?= 0
CPU_STUDY_DIR     ?= multirun/$(shell date +%Y-%m-%d)/cpu-study-$(shell date +%H-%M-%S)
# the newest training sweep, unless SWEEP=multirun/<date>/<time> is given
SWEEP       ?= $(lastword $(sort $(wildcard multirun/2*/*)))

.PHONY: setup demo test test-fast lint tensorboard clean ladder report bench-data cpu-study

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(firstword $(TORCH))" $(wordlist 2,99,$(TORCH))
	$(BIN)/python -m pip install --quiet -e ".[dev,onnx,slurm]"
	touch $@

demo: setup  ## the main job: a baseline training run on the built-in data
	$(BIN)/python -m segperf.train

test: setup  ## the whole suite, slow tests included (what CI runs)
	$(BIN)/python -m pytest

test-fast: setup  ## only the fast tests
	$(BIN)/python -m pytest -m "not slow"

ladder: setup  ## the cumulative ladder as one sweep, then its report (make ladder LADDER_ARGS="+repeat=0,1,2")
	$(BIN)/python -m segperf.train -m +opt=$(LADDER) hydra.sweep.dir=$(LADDER_DIR) $(LADDER_ARGS)
	$(BIN)/python -m segperf.report $(LADDER_DIR)

cpu-study: setup  ## the CPU study: batch 64-512 x 0/2/4 workers on MNIST, then its report (CPU_STUDY_REPEATS=0,1,2)
	$(BIN)/python -m segperf.train -m model=cnn data=mnist size=mnist repeat=$(CPU_STUDY_REPEATS) \
		batch_size=64,128,256,512 data.num_workers=0,2,4 hydra.sweep.dir=$(CPU_STUDY_DIR) $(CPU_STUDY_ARGS)
	$(BIN)/python -m segperf.report $(CPU_STUDY_DIR)

report: setup  ## report of the newest sweep (or SWEEP=...)
	$(BIN)/python -m segperf.report $(SWEEP)

bench-data: setup  ## loader-only images/s: decode x cache x workers x pin vs the naive loader (BENCH_ARGS="cold_cache=true data.cache=off")
	$(BIN)/python -m segperf.bench data $(BENCH_ARGS)

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

tensorboard: setup
	$(BIN)/tensorboard --logdir outputs

clean:
	rm -rf outputs lightning_logs .pytest_cache .ruff_cache
	find multirun -mindepth 1 ! -name README.md -prune -exec rm -rf {} +
