"""`python -m segperf.infer ckpt=<file> | run_dir=<training run dir> [overrides]`: the inference
benchmark (its command line: segperf.inference.cli)."""

from __future__ import annotations

if __name__ == "__main__":  # the command: its set-up before segperf.inference imports torch and matplotlib
    from segperf.command_line import set_up_command

    set_up_command()

from segperf.inference.cli import cli, main  # noqa: E402

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
