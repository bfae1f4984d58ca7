"""`python -m segperf.infer ckpt=<file> | run_dir=<training run dir> [overrides]`: inference benchmark.

The command line only: Hydra composes the config, segperf.inference.run does the work (the
trained weights cast to the `precision` group's dtype, timed over the validation split).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from segperf.config import CONFIG_DIR


def command_line_keys() -> set[str]:
    """Dotted keys the user set on the command line (they win over a run_dir's config)."""
    return {o.split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task}


@hydra.main(config_path=str(CONFIG_DIR), config_name="infer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from segperf.inference.checkpoint import InferenceError
    from segperf.inference.run import infer

    try:
        infer(cfg, Path(HydraConfig.get().runtime.output_dir), keep=command_line_keys())
    except InferenceError as error:  # expected failures: one line, no traceback (results.json has it)
        raise SystemExit(f"segperf.infer: error: {error}") from None


if __name__ == "__main__":
    main()
