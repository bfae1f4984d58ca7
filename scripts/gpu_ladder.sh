#!/usr/bin/env bash
# The seed study's training ladder at the seed's run size on one GPU, then its report.
#
#   scripts/gpu_ladder.sh                 # 8 cumulative configurations x 3,000 images
#   EXTRA="+repeat=0,1" scripts/gpu_ladder.sh
#
# Needs a machine with a CUDA build of PyTorch and Lightning. Other pure-Python dependencies
# missing there (hydra-core, omegaconf, torchmetrics, albumentations, tensorboard, nvidia-ml-py,
# psutil, matplotlib) are installed from wheels in $WHEELS if that folder exists (prepare it
# with `pip download -d wheels hydra-core ...` on a machine with network access), else from
# the package index. Budget: the built-in data (40 cars = 640 full-size images, ~1 min) plus
# 8 runs of 500 steps; well under 8 minutes on an H100/H200-class GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
WHEELS=${WHEELS:-wheels}
export NO_ALBUMENTATIONS_UPDATE=1

"$PY" -c "import torch, lightning; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
if ! "$PY" -c "import segperf" 2>/dev/null; then
  if [ -d "$WHEELS" ]; then
    "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps -e .
    "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" \
      hydra-core "omegaconf<2.4" antlr4-python3-runtime torchmetrics "albumentations==2.0.8" \
      tensorboard nvidia-ml-py psutil matplotlib || true
  else
    "$PY" -m pip install --quiet --no-deps -e .
    "$PY" -m pip install --quiet hydra-core "omegaconf<2.4" torchmetrics "albumentations==2.0.8" \
      tensorboard nvidia-ml-py psutil matplotlib
  fi
fi

SWEEP=${SWEEP:-multirun/gpu-ladder-$(date +%Y%m%d-%H%M%S)}
"$PY" -m segperf.train -m \
  +opt=0_baseline,1_prefetch,2_workers,3_pin,4_deconv,5_channels_last,6_compile,7_bf16 \
  size=seed data.synthetic.cars=40 trainer.enable_progress_bar=false \
  hydra.sweep.dir="$SWEEP" ${EXTRA:-}
"$PY" -m segperf.report "$SWEEP"
