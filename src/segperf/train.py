"""`python -m segperf.train [overrides]`: one measured training run (or a sweep with -m).

The command line lives in segperf.training.cli; `main` (the Hydra job) is named here too, since
the tuner runs its probes as this command's jobs.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command: its set-up before any library it imports reads it
    from segperf.command_line import set_up_command

    set_up_command()

from segperf.training.cli import cli, main  # noqa: E402

__all__ = ["cli", "main"]

if __name__ == "__main__":
    # Run the entry point of the imported module, not of `__main__`: launchers that pickle the
    # task function (hydra-submitit-launcher) pickle a `__main__` function with all of this
    # module's globals, and torch.backends.cudnn does not pickle; an imported one goes by name.
    cli()
