"""Continuing an interrupted run: `python -m segperf.train resume=<run dir>`.

The run folder keeps everything needed: Hydra's record of the overrides it was started with
(`.hydra/overrides.yaml`), its checkpoints, and its results.json. Resuming re-composes the
same config from those overrides (anything given after `resume=` is applied on top, e.g. a
different progress-bar setting), runs in the same folder, and hands Lightning the newest
checkpoint, which restores the model, the optimizer, the step counter and (segperf.data.
resumable) the position in the sampler's order.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from omegaconf import OmegaConf

from segperf.command_line import path_value
from segperf.schema import SettingsError

# Lightning saves `interrupted.ckpt` when a run is stopped (Ctrl-C, SIGTERM, an error) and
# ModelCheckpoint keeps `last.ckpt` up to date at every validation.
CHECKPOINT_NAMES = ("interrupted.ckpt", "last.ckpt")


def resume_argv(argv: list[str]) -> list[str]:
    """Rewrite `resume=DIR [more overrides]` into the overrides DIR was started with, then the
    new ones, then `hydra.run.dir=DIR` (so Hydra writes into the same folder)."""
    given = [a for a in argv if a.startswith("resume=")]
    if not given:
        return argv
    if any(a in ("-m", "--multirun") for a in argv):
        raise SettingsError(["resume=: continues one run; it cannot be combined with -m (a sweep)"])
    run_dir = Path(path_value(given[-1])).expanduser()  # as typed, quoted or not (segperf.command_line)
    run_dirs = [path_value(a) for a in argv if a.startswith("hydra.run.dir=")]
    if run_dirs and Path(run_dirs[-1]).expanduser().resolve() == run_dir.resolve():
        return argv  # already rewritten: the other ranks of a DDP run start from rank 0's command
    recorded_file = run_dir / ".hydra" / "overrides.yaml"
    if run_dir.is_file():
        raise SettingsError(
            [f"resume={run_dir}: a file, not a run folder; give the folder that holds the run's results.json"]
        )
    if not recorded_file.is_file():
        raise SettingsError(
            [
                f"resume={run_dir}: not a segperf run folder (no {recorded_file}); give the folder that holds the "
                "interrupted run's results.json"
            ]
        )
    recorded = [str(o) for o in OmegaConf.load(recorded_file)]
    recorded = [o for o in recorded if not o.startswith(("resume=", "hydra.run.dir="))]
    rest = [a for a in argv if not a.startswith("resume=")]
    return [*recorded, *rest, f"resume={run_dir}", f"hydra.run.dir={run_dir}"]


def resume_checkpoint(run_dir: Path) -> Path:
    """The newest checkpoint of an interrupted run folder; a clear error when there is nothing to resume."""
    results_file = run_dir / "results.json"
    if results_file.is_file():
        status = json.loads(results_file.read_text()).get("status")
        if status == "completed":
            raise SettingsError(
                [f"resume={run_dir}: that run completed; there is nothing to resume (start a new run instead)"]
            )
    found = [run_dir / "checkpoints" / name for name in CHECKPOINT_NAMES]
    found = sorted((path for path in found if path.is_file()), key=lambda path: path.stat().st_mtime, reverse=True)
    if not found:
        raise SettingsError(
            [
                f"resume={run_dir}: no checkpoint in {run_dir / 'checkpoints'} (the run stopped before it saved one); "
                "start it again without resume="
            ]
        )
    # a torch checkpoint is a zip archive: one cut short has no central directory at its end
    readable = [path for path in found if zipfile.is_zipfile(path)]
    if not readable:
        names = " and ".join(path.name for path in found)
        raise SettingsError(
            [
                f"resume={run_dir}: {names} in {run_dir / 'checkpoints'} "
                f"{'is not a readable checkpoint' if len(found) == 1 else 'are not readable checkpoints'} "
                "(truncated, or not a torch checkpoint); nothing to resume from: start the run again without resume="
            ]
        )
    if readable[0] != found[0]:
        print(
            f"segperf: note: {found[0]} is not a readable checkpoint (truncated, or not a torch checkpoint); "
            f"resuming from {readable[0].name} instead"
        )
    return readable[0]


def resume_command(run_dir: Path) -> str:
    return f"python -m segperf.train resume={run_dir}"
