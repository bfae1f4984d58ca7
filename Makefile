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

# the suite runs in TEST_WORKERS processes (pytest-xdist; TEST_WORKERS=0: in one process), each test
# sent to whichever worker is free (--dist load; by module, --dist loadscope, tests/test_cli.py's runs,
# about half the slow tier, would all wait for one worker; pytest 9.2 no longer honours xdist_group);
# the few tests marked `serial` read how busy the machine is, so they run afterwards, alone; they are
# all slow tests too (tests/conftest.py refuses a fast one), so `make test-fast` has no serial pass.
# A plain `pytest` runs it all in one process.
TEST_WORKERS ?= 2
PARALLEL    := -n $(TEST_WORKERS) --dist load
# the files that hold `serial` tests: the serial pass collects only these (collecting the whole
# suite to pick out a test or two took ~9 s of the fast tier)
SERIAL_FILES := $(shell grep -rl --include='*.py' 'mark\.serial' tests)

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
# overrides of `python -m segperf.tune` (training overrides and tune.*), e.g. TUNE_ARGS="data.height=128 data.width=192"
TUNE_ARGS   ?=
# the newest training sweep, unless SWEEP=multirun/<date>/<time> is given
SWEEP       ?= $(lastword $(sort $(wildcard multirun/2*/*)))

# `make gpu-wheels`: what scripts/gpu_check.sh installs on the GPU machine (no package index there;
# docs/GPU.md): the packages its image lacks (the check is a pytest run: tests/gpu/), as wheels for its CPython 3.12 on manylinux x86-64,
# one version each, no dependency resolved by pip (--no-deps): every dependency is named here.
# hydra-core needs omegaconf, antlr4-python3-runtime 4.9.* and packaging; omegaconf needs antlr4 and
# PyYAML. antlr4-python3-runtime 4.9.3 is a source release only: built here (pure Python, any 3.x).
# PyYAML and packaging are on the image as described; they travel in case, installed only if missing.
# pytest needs pluggy, iniconfig, packaging and Pygments (Requires-Dist of pytest 9.2).
# albumentations is not here: imported only with augment=basic, which the check never uses.
GPU_WHEELS_DIR ?= .whl
GPU_PYVER      ?= 3.12
GPU_WHEELS     := hydra-core==1.3.8 omegaconf==2.3.1 packaging==26.4 PyYAML==6.0.4 pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 Pygments==2.21.0
GPU_SDISTS     := antlr4-python3-runtime==4.9.3
GPU_WHEELS_MAX_MIB := 40
GPU_PIP        := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) -m pip

.PHONY: setup demo test test-fast lint docs tensorboard clean ladder report bench-data cpu-study tune gpu-wheels

setup: $(STAMP)

# Set-up in ~20 s rather than ~60 s: torch comes from pip (which reads this machine's pip
# configuration, the TORCH line's --index-url included); the project and its ~100 dependencies
# from uv, which fetches in parallel (pip: one index page after another), or from pip where uv
# cannot be installed. Not everything is byte-compiled up front (torch alone is 12,000 modules,
# ~25 s on 2 cores): scripts/compile_bytecode.py compiles the ~4,500 modules the commands and
# tests import, on every core (~5 s; left to the first imports, the test workers each compiled
# them at once, ~35 s); any other module is compiled the first time a process imports it and
# cached in the venv, as Python does by default. PYTHONDONTWRITEBYTECODE, if the shell sets it,
# is cleared for make's commands, or every process would compile torch and Lightning again.
export PYTHONDONTWRITEBYTECODE :=
EXTRAS := dev,onnx,slurm,docs

# uv is installed while torch is (two pip processes, two packages), and torch's modules are
# compiled while uv installs the rest (~5 s less); then the rest and the project's own src/.
# (`wait` in this shell, not in a ( subshell ), which cannot wait for its parent's jobs.)
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile uv & uv=$$!; \
	$(BIN)/python -m pip install --quiet --no-compile "$(firstword $(TORCH))" $(wordlist 2,99,$(TORCH)) \
	  || { wait $$uv; exit 1; }; \
	$(BIN)/python scripts/compile_bytecode.py --package torch & compiling=$$!; \
	{ wait $$uv && $(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[$(EXTRAS)]"; } \
	  || $(BIN)/python -m pip install --quiet --no-compile -e ".[$(EXTRAS)]" \
	  || { wait $$compiling; exit 1; }; \
	wait $$compiling
	$(BIN)/python scripts/compile_bytecode.py
	$(BIN)/python -m compileall -q -j 0 src
	touch $@

demo: setup  ## the main job: a baseline training run on the built-in data
	$(BIN)/python -m segperf.train

test: setup  ## the whole suite, slow tests included (what CI runs)
	$(BIN)/python -m pytest $(PARALLEL) -m "not serial"
	$(BIN)/python -m pytest -m serial $(SERIAL_FILES)

test-fast: setup  ## only the fast tests
	$(BIN)/python -m pytest $(PARALLEL) -m "not slow and not serial"

ladder: setup  ## the cumulative ladder as one sweep, then its report (make ladder LADDER_ARGS="+repeat=0,1,2")
	$(BIN)/python -m segperf.train -m +opt=$(LADDER) hydra.sweep.dir=$(LADDER_DIR) $(LADDER_ARGS)
	$(BIN)/python -m segperf.report $(LADDER_DIR)

cpu-study: setup  ## the CPU study: batch 64-512 x 0/2/4 workers on MNIST, then its report (CPU_STUDY_REPEATS=0,1,2)
	$(BIN)/python -m segperf.train -m model=cnn data=mnist size=mnist repeat=$(CPU_STUDY_REPEATS) \
		batch_size=64,128,256,512 data.num_workers=0,2,4 hydra.sweep.dir=$(CPU_STUDY_DIR) $(CPU_STUDY_ARGS)
	$(BIN)/python -m segperf.report $(CPU_STUDY_DIR)

tune: setup  ## the fastest configuration for this machine (10 min): tuned.yaml for +opt=tuned, tune_report.md (TUNE_ARGS=...)
	$(BIN)/python -m segperf.tune $(TUNE_ARGS)

report: setup  ## report of the newest sweep (or SWEEP=...)
	$(BIN)/python -m segperf.report $(SWEEP)

bench-data: setup  ## loader-only images/s: decode x cache x workers x pin vs the naive loader (BENCH_ARGS="cold_cache=true data.cache=off")
	$(BIN)/python -m segperf.bench data $(BENCH_ARGS)

gpu-wheels:  ## wheels of what the GPU machine lacks, into $(GPU_WHEELS_DIR)/ (scripts/gpu_check.sh installs them)
	mkdir -p $(GPU_WHEELS_DIR)
	$(GPU_PIP) download --quiet --no-deps --only-binary=:all: -d $(GPU_WHEELS_DIR) \
		--python-version $(GPU_PYVER) --implementation cp --abi cp$(subst .,,$(GPU_PYVER)) \
		--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
		$(GPU_WHEELS)
	$(GPU_PIP) wheel --quiet --no-deps -w $(GPU_WHEELS_DIR) $(GPU_SDISTS)
	@ls -1 $(GPU_WHEELS_DIR)/*.whl
	@kib=$$(du -sk $(GPU_WHEELS_DIR) | cut -f1); echo "$(GPU_WHEELS_DIR): $$kib KiB"; \
		test $$kib -le $$(($(GPU_WHEELS_MAX_MIB) * 1024)) || { echo "over $(GPU_WHEELS_MAX_MIB) MiB"; exit 1; }

lint: setup
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts

docs: setup  ## the documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link or anchor stops it
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

tensorboard: setup
	$(BIN)/tensorboard --logdir outputs

clean:
	rm -rf outputs lightning_logs site .pytest_cache .ruff_cache
	find multirun -mindepth 1 ! -name README.md -prune -exec rm -rf {} +
