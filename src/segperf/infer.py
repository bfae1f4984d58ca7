"""`python -m segperf.infer ckpt=<file> | run_dir=<training run dir> [overrides]`: the inference
benchmark (its command line: segperf.inference.cli)."""

from __future__ import annotations

from segperf.inference.cli import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
