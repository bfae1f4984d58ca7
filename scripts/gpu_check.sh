#!/usr/bin/env bash
# The GPU check in one offline call (docs/GPU.md): the tests of tests/gpu/ on a lent GPU machine.
#
#   bash scripts/gpu_check.sh              # on the GPU machine, $OUT set, the .whl/ folder carried
#   bash scripts/gpu_check.sh --rehearse   # the same steps on this CPU: tiny sizes, a fake NVML
#
# 1. installs the wheels of `make gpu-wheels` that the machine lacks (hydra, pytest, ...) into a
#    temp folder (pip --no-index --no-deps --target) and runs the project from src/ against the
#    machine's own torch;
# 2. runs `pytest tests/gpu/test_claims.py`: its session makes the check's one sweep (the seed's
#    ladder +opt=0_baseline ... 7_bf16, then +opt=all, all_cache_device, all_fp16; tests/gpu/sweep.py),
#    its report, and a verdict per claim, one test each (PASS, or FAIL with the figure; SKIP with
#    the reason where the evidence cannot exist here);
# 3. leaves at most 8 files in $OUT: verdicts.txt, verdicts.json, report.md, three charts,
#    results.tar.gz (every results.json, summary.txt, report.json) and gpu_check.log.
#
# Environment: OUT (required on the GPU; a rehearsal defaults to a temp folder), PYTHON (python3;
# a rehearsal: .venv/bin/python if there), GPU_WHEELS_DIR (.whl), GPU_CHECK_BUDGET_S (the whole
# check's time limit, 480; rehearsed 300), SEGPERF_CACHE (built-in data and compile caches; a temp
# folder), GPU_CHECK_WORK (the sweep's folder; a temp folder), GPU_CHECK_ARGS (more Hydra overrides
# for every run of the sweep, e.g. train_images=300).
# Exit status: 0 ran to the end, no FAIL; 3 ran to the end with a FAIL; 1 the check itself broke.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

MODE=gpu
case "${1:-}" in
  --rehearse) MODE=rehearse ;;
  "") ;;
  *) echo "usage: $0 [--rehearse]" >&2; exit 1 ;;
esac

if [ "$MODE" = rehearse ]; then
  [ -x .venv/bin/python ] && DEFAULT_PYTHON=.venv/bin/python || DEFAULT_PYTHON=python3
  export GPU_CHECK_REHEARSE=1
  BUDGET=${GPU_CHECK_BUDGET_S:-300}
else
  DEFAULT_PYTHON=python3
  BUDGET=${GPU_CHECK_BUDGET_S:-480}
fi
PY=${PYTHON:-$DEFAULT_PYTHON}
WHEELS=${GPU_WHEELS_DIR:-.whl}
WORK=${GPU_CHECK_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/segperf-gpu-check.XXXXXX")}
if [ -z "${OUT:-}" ]; then
  [ "$MODE" = rehearse ] || { echo "gpu_check: set OUT to the folder the files go to" >&2; exit 1; }
  OUT=$WORK/out
fi
mkdir -p "$OUT" "$WORK"
SITE=$WORK/site
export SEGPERF_CACHE=${SEGPERF_CACHE:-$WORK/cache}
export PYTHONPATH=$SITE:$REPO/src:$REPO${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 NO_ALBUMENTATIONS_UPDATE=1 MPLBACKEND=Agg
START=$SECONDS
left() { echo $((BUDGET - (SECONDS - START))); }
say() { echo "gpu_check [$((SECONDS - START)) s]: $*"; }

# everything printed goes to $OUT/gpu_check.log as it happens: it comes back even if the machine
# stops the command before the end
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
TEE=$!
trap 'exec >&- 2>&-; wait "$TEE" 2>/dev/null || true' EXIT  # the log complete before the command returns
say "mode $MODE, python $PY, work folder $WORK, budget $BUDGET s"

# -- 1. the missing packages, from wheels -----------------------------------------------------
# import name of each distribution make gpu-wheels fetches; "always": the image lacks it, so it
# is installed (and imported from $SITE) whatever the interpreter has; the others only if missing
module_of() {
  case "$1" in
    hydra_core) echo "hydra always" ;;
    omegaconf) echo "omegaconf always" ;;
    antlr4_python3_runtime) echo "antlr4 always" ;;
    pyyaml | PyYAML) echo "yaml if-missing" ;;
    packaging) echo "packaging if-missing" ;;
    pytest) echo "pytest always" ;;
    pluggy) echo "pluggy always" ;;
    iniconfig) echo "iniconfig always" ;;
    pygments | Pygments) echo "pygments if-missing" ;;
    *) echo "" ;;
  esac
}
shopt -s nullglob
wheels=("$WHEELS"/*.whl)
[ ${#wheels[@]} -gt 0 ] || { say "no wheels in $WHEELS: run 'make gpu-wheels' where the package index is reachable"; exit 1; }
dists=$(for w in "${wheels[@]}"; do basename "$w" | cut -d- -f1 | tr 'A-Z-' 'a-z_'; done | sort)
if [ -n "$(uniq -d <<<"$dists")" ]; then
  say "two versions of: $(uniq -d <<<"$dists" | tr '\n' ' ')in $WHEELS; keep one of each"
  exit 1
fi
if [ "$MODE" = rehearse ]; then
  # the wheel set as the GPU machine's CPython 3.12 would install it: tags and completeness
  "$PY" -m pip install --dry-run --quiet --no-index --no-deps --target "$WORK/site-cp312" \
    --python-version 3.12 --implementation cp --abi cp312 --platform manylinux2014_x86_64 \
    --only-binary=:all: "${wheels[@]}"
  say "the ${#wheels[@]} wheels install for CPython 3.12 / manylinux x86-64 (pip --dry-run)"
fi
pytag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
install=()
for w in "${wheels[@]}"; do
  name=$(basename "$w")
  read -r module when <<<"$(module_of "$(cut -d- -f1 <<<"$name")")"
  if [[ $name == *-cp3* && $name != *-"$pytag"-* ]]; then
    say "skip $name: built for another Python than $pytag (this interpreter's own is used)"
  elif [ "${when:-always}" = always ] || ! "$PY" -c "import $module" 2>/dev/null; then
    install+=("$w")
  fi
done
"$PY" -m pip install --quiet --upgrade --no-index --no-deps --no-compile --disable-pip-version-check \
  --target "$SITE" "${install[@]}"
say "installed into $SITE: $(for w in "${install[@]}"; do basename "$w"; done | tr '\n' ' ')"

# -- 2. the tests: the sweep, its report, a verdict per claim ------------------------------------
status=0
GPU_CHECK_SITE=$SITE GPU_CHECK_OUT=$OUT GPU_CHECK_WORK=$WORK GPU_CHECK_BUDGET_S=$(left) \
  timeout --signal=TERM --kill-after=20 "$(($(left) + 30))" \
  "$PY" -m pytest tests/gpu/test_claims.py -p no:cacheprovider -v -rs -s || status=$?

# -- 3. the files (written by the tests' session) ------------------------------------------------
say "files in $OUT: $(find "$OUT" -maxdepth 1 -type f -printf "%f " | sort)"
if [ ! -f "$OUT/verdicts.txt" ]; then
  say "the verdicts could not be made (pytest status $status)"; exit 1
fi
case $status in
  0) say "done: $(tail -n 1 "$OUT/verdicts.txt")"; exit 0 ;;
  1) say "done: $(tail -n 1 "$OUT/verdicts.txt")"; exit 3 ;;
  *) say "pytest ended with status $status"; exit 1 ;;
esac
