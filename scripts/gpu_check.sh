#!/usr/bin/env bash
# One prepared check of every GPU claim segperf makes, in one offline run (docs/GPU.md).
#
#   bash scripts/gpu_check.sh              # on the GPU machine, $OUT set, the .whl/ folder carried
#   bash scripts/gpu_check.sh --rehearse   # the same steps on this CPU: tiny sizes, a fake NVML
#
# 1. installs the wheels of `make gpu-wheels` that the machine lacks into a temp folder
#    (pip --no-index --no-deps --target), checks every import, and runs the project from src/
#    against the machine's own torch;
# 2. one sweep (size=gpu_check: the seed's run with 600 training images): the seed's ladder
#    +opt=0_baseline ... 7_bf16, then +opt=all, +opt=all_cache_device, +opt=all_fp16 (presets in
#    scripts/gpu_check_conf), every run with the probe callback (scripts/gpu_probe.py);
# 3. the report (python -m segperf.report), then a PASS/FAIL/SKIP verdict per claim, each with its
#    figure (scripts/gpu_verdicts.py);
# 4. at most 8 files into $OUT: verdicts.txt, verdicts.json, report.md, three charts,
#    results.tar.gz (every results.json, summary.txt, report.json) and gpu_check.log.
#
# Environment: OUT (required on the GPU; a rehearsal defaults to a temp folder), PYTHON (python3;
# a rehearsal: .venv/bin/python if there), GPU_WHEELS_DIR (.whl), GPU_CHECK_BUDGET_S (the whole
# check's time limit, 480), SEGPERF_CACHE (built-in data and compile caches; a temp folder),
# GPU_CHECK_WORK (the sweep's folder; a temp folder), GPU_CHECK_ARGS (more Hydra overrides).
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
  # the ladder's first step, its pin step, +opt=all and the device cache (both bf16): compile
  # takes a minute on a CPU and fp16 seconds a step, so the rehearsal runs eager and has no fp16
  PLAN=0_baseline,3_pin,all,all_cache_device
  SIZE=gpu_rehearse
  MODE_ARGS=(compile=off)
  TRAIN=(scripts/gpu_train.py)
  export SEGPERF_FAKE_NVML=1
  BUDGET=${GPU_CHECK_BUDGET_S:-300}
else
  DEFAULT_PYTHON=python3
  PLAN=0_baseline,1_prefetch,2_workers,3_pin,4_deconv,5_channels_last,6_compile,7_bf16,all,all_cache_device,all_fp16
  SIZE=gpu_check
  MODE_ARGS=()
  TRAIN=(-m segperf.train)
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
SWEEP=$WORK/sweep
CONF=$REPO/scripts/gpu_check_conf
export SEGPERF_CACHE=${SEGPERF_CACHE:-$WORK/cache}
export PYTHONPATH=$SITE:$REPO/src:$REPO/scripts${PYTHONPATH:+:$PYTHONPATH}
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

# -- 2. the sweep -------------------------------------------------------------------------------
ARGS=(size="$SIZE" "hydra.searchpath=[file://$CONF]")
# every import a run needs, where it comes from, and the built-in data (scripts/gpu_train.py)
"$PY" scripts/gpu_train.py --prepare "$SITE" "$MODE" "${ARGS[@]}"
# the sweep gets what is left less 60 s for the report, the verdicts and the files; stopped
# there (SIGTERM: the running job records itself as interrupted), what finished is judged
sweep_s=$(($(left) - 60))
[ "$sweep_s" -ge 30 ] || sweep_s=30
say "sweep +opt=$PLAN into $SWEEP (at most $sweep_s s)"
# shellcheck disable=SC2086  # GPU_CHECK_ARGS: overrides separated by spaces
timeout --signal=TERM --kill-after=20 "$sweep_s" \
  "$PY" "${TRAIN[@]}" -m "+opt=$PLAN" "${ARGS[@]}" "${MODE_ARGS[@]}" hydra.sweep.dir="$SWEEP" \
  ${GPU_CHECK_ARGS:-} || say "the sweep ended with status $? (124: stopped at the time limit)"

# -- 3. report and verdicts ------------------------------------------------------------------------
timeout 90 "$PY" -m segperf.report "$SWEEP" || say "the report failed (status $?); verdicts read results.json alone"
verdict_args=("$SWEEP" --out "$WORK/verdicts" --planned "$PLAN")
[ "$MODE" = rehearse ] && verdict_args+=(--rehearsal)
status=0
"$PY" scripts/gpu_verdicts.py "${verdict_args[@]}" || status=$?

# -- 4. the files -------------------------------------------------------------------------------
for f in "$WORK/verdicts/verdicts.txt" "$WORK/verdicts/verdicts.json" "$SWEEP/report.md" \
  "$SWEEP/training_time_by_phase.png" "$SWEEP/training_throughput.png" "$SWEEP/jitter_utilization.png"; do
  if [ -f "$f" ]; then cp "$f" "$OUT/"; fi
done
[ -d "$SWEEP" ] && (cd "$SWEEP" && find . \( -name results.json -o -name summary.txt -o -name report.json -o -name multirun.yaml \) \
  -print0 | tar --null -czf "$OUT/results.tar.gz" -T -)
say "files in $OUT: $(find "$OUT" -maxdepth 1 -type f -printf "%f " | sort)"
case $status in
  0 | 3) say "done: $(tail -n 1 "$WORK/verdicts/verdicts.txt")"; exit "$status" ;;
  *) say "the verdicts could not be made (status $status)"; exit 1 ;;
esac
