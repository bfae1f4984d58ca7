"""The tuner's Measure: candidate configurations run as short training jobs through Hydra's
launcher, and each job's results.json read back as a Probe (segperf.tune.probe).

A configuration (a sorted tuple of override strings, the tune's start included) becomes a job
by adding the probe's run size after it, and segperf.callbacks.steady_probe.SteadyProbe, which
times the probe's steady state: a warm-up of at least `warmup_steps` steps (and the steps ShareCores
may add to it, segperf.callbacks.share_cores) that lasts as long as the step times still fall, the
batches the DataLoader queued before the timed steps left out, then at least `tune.probe.steps`
timed steps, until the rate is known to `tune.probe.precision`, at most `tune.probe.max_steps`
(the run's size leaves as many steps again for the warm-up the times add and the queue); one
small validation at the end (the run always validates once), no checkpoint. The probe's images/s
are SteadyProbe's (results.json `tune_probe`), not `train.images_per_s` (a fixed warm-up).

Every run of the tune's (probes and learning runs) adds segperf.callbacks.epoch_end_validation: one
that crosses an epoch end of a user's shorter training split validates at each epoch's end when the
module or its callbacks watch a validation metric there (ReduceLROnPlateau on `val/loss`); in a speed
probe a user's EarlyStopping judges those validations but does not end it (a probe measures speed:
stopped short, it would read as a cut, slower probe). A run that still fails for the probe's shape
is run once more in the user's own (segperf.tune.probe_shape).

A per-probe time limit becomes `trainer.max_time`: Lightning's Timer stops training after the
step that passes it and the run ends like a finished one. A probe stopped there after its fewest
timed steps keeps its rate, marked less precise (`imprecise`); one stopped before them is cut, with
no images/s. The limit counts from the first training step (Lightning's Timer starts there): a
probe's start-up (building the data and the net, filling a cache) is not cut, only what it spends
training. A single step that runs far past the limit is stopped inside it at HARD_LIMIT_FACTOR
times the limit (segperf.callbacks.hard_time_limit): such a probe is marked cut too, with no images/s.
A screening floor (images/s) adds segperf.callbacks.screen_out.ScreenOut to the job's callbacks: a probe
below it after its first `tune.probe.screen_steps` timed steps stops there and is marked screened.

Quality probes are learning runs of the same configurations at the size `tune.quality.runs`
gives for the model (size=demo for the U-Net: its Dice after a minute says whether a setting
learns as well; see segperf.tune.quality_runs), with the start's own run-size overrides left out; a model
without a size of its own there (a user's) learns at the start's own run size.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from segperf.command_line import override_key
from segperf.tune.probe import Config, Probe
from segperf.tune.probe_results import first_line, probe_from_results
from segperf.tune.probe_shape import failed_for_its_shape, settled, users_shape
from segperf.tune.space import without_keys

# what a probe sets itself (the start's own values of these keys are replaced)
PROBE_SIZE_KEYS = (
    "train_images",
    "val_images",
    "val_every_images",
    "trainer.max_time",
    "callbacks.tune_screen",
    "callbacks.tune_time_limit",
    "callbacks.tune_probe",
    "callbacks.tune_epoch_ends",
)
STEADY_TARGET = "segperf.callbacks.steady_probe.SteadyProbe"
# a probe's precision where tune.probe gives none (the relative half-width of its 95% interval)
PRECISION = 0.05
SCREEN_TARGET = "segperf.callbacks.screen_out.ScreenOut"
HARD_LIMIT_TARGET = "segperf.callbacks.hard_time_limit.HardTimeLimit"
# every run of the tune's, speed and learning: one that crosses an epoch end of the user's training
# split validates before it when a metric is watched there (segperf.callbacks.epoch_end_validation)
EPOCH_ENDS = "+callbacks.tune_epoch_ends={_target_:segperf.callbacks.epoch_end_validation.EpochEndValidation}"
# a speed probe's: a user's EarlyStopping judges its validations but does not end it (a probe
# measures speed; stopped short, it would read as a cut, slower probe)
PROBE_EPOCH_ENDS = EPOCH_ENDS.removesuffix("}") + ",probe:true}"
# the hard limit, inside a step, at this multiple of the probe's time limit (Lightning's max_time,
# checked after each step): a step that runs for minutes (fp16 emulated: 177 s a step) is stopped
# inside it, while an ordinary probe ends at max_time, well before (segperf.callbacks.hard_time_limit)
HARD_LIMIT_FACTOR = 3.0
# run-size keys of the start left out of a quality run: the learning run has its own size
RUN_SIZE_KEYS = ("size", "train_images", "val_images", "batch_size", "val_every_images", "data.height", "data.width")


def merged(*groups: Iterable[str]) -> list[str]:
    """Override lists joined, a later override of the same key replacing an earlier one (Hydra
    refuses two values for one config group in one command line)."""
    by_key: dict[str, str] = {}
    for group in groups:
        for override in group:
            by_key.pop(override_key(override), None)
            by_key[override_key(override)] = override
    return list(by_key.values())


def max_time(limit_s: float) -> str:
    """`trainer.max_time` for a limit in seconds: Lightning's DD:HH:MM:SS, whole seconds, at least 1."""
    seconds = max(1, math.ceil(limit_s))
    return f"'00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}'"


def setting(overrides: Sequence[str], key: str, default: Any) -> Any:
    """The value `overrides` give `key` (YAML-read: `batch_size=8` -> 8), else `default`."""
    import yaml

    for override in reversed(overrides):
        if override_key(override) == key and "=" in override:
            try:
                return yaml.safe_load(override.split("=", 1)[1])
            except yaml.YAMLError:
                return default
    return default


def speed_measure(master: Any, loader: Any, launcher: Any, settings: Any) -> LaunchMeasure:
    """The search's speed probes, as tune.probe sets them."""
    return LaunchMeasure(
        master, loader, launcher, kind="speed", probe=OmegaConf.to_container(settings.probe, resolve=True)
    )


class LaunchMeasure:
    """The search's Measure (segperf.tune.probe): each batch of configurations as one launch of
    the configured Hydra launcher, one job per entry, in the order given (A B A B stays A B A B;
    a parallel launcher runs them side by side). Job numbers continue over the tune and over its
    reruns (the sweep folder's highest `<num>_...` folder + 1), so no run folder is written twice.

    `kind` "speed" runs probes (`probe` settings: steps, val_images, overrides); "quality" runs the
    learning runs of `quality_runs` instead (with the probes' overrides), without a time limit: a
    learning run cut short would judge a configuration on less training. A learning run leaves
    out the configuration's run size (`quality_runs` sets its own), unless `keep_run_size` (a
    model without a learning run of its own: the size the tune was given is its learning run)."""

    def __init__(
        self,
        master: Any,
        loader: Any,
        launcher: Any,
        *,
        kind: str,
        probe: Mapping[str, Any],
        quality_runs: Sequence[str] = (),
        keep_batch_size: bool = False,
        keep_run_size: bool = False,
    ) -> None:
        self.master, self.loader, self.launcher, self.kind = master, loader, launcher, kind
        self.probe = probe
        self.quality_runs = list(quality_runs)
        self.keep_batch_size = keep_batch_size
        self.keep_run_size = keep_run_size
        self.sweep_dir = Path(str(master.hydra.sweep.dir))
        self._problems: dict[Config, str | None] = {}
        self._identities: dict[Config, str] = {}

    def job_overrides(self, config: Config, limit_s: float | None, floor: float | None = None) -> list[str]:
        """The command line of one job of `config` (`floor`: the screening floor in images/s)."""
        if self.kind == "quality":
            keep = RUN_SIZE_KEYS if self.keep_run_size else ("batch_size",) if self.keep_batch_size else ()
            drop = [k for k in RUN_SIZE_KEYS if k not in keep]
            own = without_keys(config, drop)
            # the configuration's own seed wins over one in tune.quality.runs: the quality guard's
            # confirming run (seed + 1) must not be put back on the first run's seed
            seed = [o for o in own if override_key(o) == "seed"]
            return merged(self.probe["overrides"], own, self.quality_runs, seed, [EPOCH_ENDS])
        batch = setting(config, "batch_size", self.master.batch_size)
        warmup = setting(config, "warmup_steps", self.master.warmup_steps)
        # on a CPU with workers, ShareCores adds its measuring steps to the warm-up: the probe runs
        # them too, so that it still times `steps` steps (more where they are not taken)
        sharing = OmegaConf.select(self.master, "callbacks.share_cores.measure_steps", default=0) or 0
        steady = self.steady_settings(warmup)
        # room for the cap's timed steps and as many again for the warm-up the step times add and the
        # loader's queue (2 workers x prefetch_factor 8: 16 batches); SteadyProbe stops it sooner
        images = (warmup + sharing + 2 * steady["max_steps"]) * batch
        size = [f"train_images={images}", f"val_images={self.probe['val_images']}", f"val_every_images={images}"]
        settings = ",".join(f"{key}:{value:.6g}" for key, value in steady.items())
        limit = [f"+callbacks.tune_probe={{_target_:{STEADY_TARGET},{settings}}}", PROBE_EPOCH_ENDS]
        if limit_s is not None:
            hard = f"{{_target_:{HARD_LIMIT_TARGET},seconds:{HARD_LIMIT_FACTOR * limit_s:.6g}}}"
            limit += [f"trainer.max_time={max_time(limit_s)}", f"+callbacks.tune_time_limit={hard}"]
        if floor is not None:
            steps = max(1, min(int(self.probe.get("screen_steps", 2)), self.probe["steps"]))
            screen = f"floor_images_per_s:{floor:.6g},timed_steps:{steps},warmup_steps:{warmup}"
            limit.append(f"+callbacks.tune_screen={{_target_:{SCREEN_TARGET},{screen}}}")
        return merged(self.probe["overrides"], config, size, limit)

    def steady_settings(self, warmup: int) -> dict[str, Any]:
        """SteadyProbe's settings from tune.probe: the fewest warm-up steps, the fewest and the most
        timed steps, the precision to stop at."""
        steps = int(self.probe["steps"])
        return {
            "warmup_steps": int(warmup),
            "min_steps": max(2, steps),
            "max_steps": max(2, steps, int(self.probe.get("max_steps", steps))),
            "precision": float(self.probe.get("precision", PRECISION)),
        }

    def seed(self, config: Config) -> int | None:
        """The seed a job of `config` trains with (its composed top-level `seed`: the default, the
        configuration's own, or tune.quality.runs'), None when it does not compose or sets none."""
        try:
            composed = self.loader.load_sweep_config(self.master, self.job_overrides(config, None))
        except Exception:  # Hydra's and OmegaConf's composition errors: reported when it is measured
            return None
        seed = composed.get("seed")
        return int(seed) if isinstance(seed, int) else None

    def composition_problem(self, config: Config, overrides: list[str]) -> str | None:
        """One line when Hydra cannot compose the job (an option this workload has no group
        for), checked here: the basic launcher would raise it and end the tune."""
        if config not in self._problems:
            try:
                self.loader.load_sweep_config(self.master, list(overrides))
                self._problems[config] = None
            except Exception as error:  # Hydra's and OmegaConf's composition errors
                self._problems[config] = f"does not compose: {first_line(error)}"
        return self._problems[config]

    def identity(self, config: Config) -> str:
        """What a probe of `config` trains, as one string: its composed job config, interpolations
        resolved, without Hydra's node and the tune's settings. Two configurations with the same
        identity (workers=auto and data.num_workers=2 on 2 cores) train the same run, so the search
        measures them once (segperf.tune.ledger). A configuration that does not compose is its own."""
        if config not in self._identities:
            try:
                composed = self.loader.load_sweep_config(self.master, self.job_overrides(config, None))
            except Exception:  # Hydra's and OmegaConf's composition errors: reported when it is measured
                self._identities[config] = json.dumps(list(config))
                return self._identities[config]
            plain = {}
            for key in composed:
                if key in ("hydra", "tune"):
                    continue
                node = composed[key]
                try:
                    plain[key] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
                except Exception:  # ${hydra:...} (the run folder) resolves only inside a job: the same for all
                    plain[key] = OmegaConf.to_container(node, resolve=False)
            if isinstance(plain.get("data"), dict):
                plain["data"] = _as_loaded(plain["data"])
            self._identities[config] = json.dumps(plain, sort_keys=True, default=str)
        return self._identities[config]

    def next_job(self) -> int:
        numbers = [
            int(p.name.split("_", 1)[0]) for p in self.sweep_dir.glob("*_*") if p.name.split("_", 1)[0].isdigit()
        ]
        return max(numbers, default=-1) + 1

    def __call__(self, configs: Sequence[Config], limit_s: float | None, floor: float | None = None) -> list[Probe]:
        limit_s = None if self.kind == "quality" else limit_s
        floor = None if self.kind == "quality" else floor
        probes: list[Probe | None] = [None] * len(configs)
        batch, where = [], []
        for index, config in enumerate(configs):
            overrides = self.job_overrides(config, limit_s, floor)
            problem = self.composition_problem(config, overrides)
            if problem:
                probes[index] = Probe(config, None, failed=problem)
            else:
                batch.append(overrides)
                where.append(index)
        if batch:
            found = self._launch([configs[i] for i in where], batch, limit_s is not None)
            # a run that failed for the probe's shape (not its configuration's) once more, in the user's own
            again = [k for k, probe in enumerate(found) if failed_for_its_shape(probe)]
            if again:
                shaped = [users_shape(batch[k], self.master.val_every_images) for k in again]
                retried = self._launch([configs[where[k]] for k in again], shaped, limit_s is not None)
                for k, probe in zip(again, retried, strict=True):
                    found[k] = settled(found[k], probe)
            for i, probe in zip(where, found, strict=True):
                probes[i] = probe
        return [p for p in probes if p is not None]

    def _launch(self, configs: list[Config], batch: list[list[str]], limited: bool) -> list[Probe]:
        """One launch of `batch` (the command lines of `configs`), each job read back as a Probe."""
        started = time.monotonic()
        returns = self.launcher.launch(batch, initial_job_idx=self.next_job())
        elapsed = time.monotonic() - started
        found = [self._probe_of(config, job, limited) for config, job in zip(configs, returns, strict=True)]
        # a run's own wall time, plus its share of what the launch took besides the runs
        # (composing each job, Hydra's set-up, a submitit job's start): what it cost the budget
        extra = max(0.0, elapsed - sum(p.wall_s for p in found)) / len(found)
        return [replace(probe, wall_s=probe.wall_s + extra) for probe in found]

    def _probe_of(self, config: Config, job: Any, limited: bool) -> Probe:
        run_dir = Path(str(job.hydra_cfg.hydra.runtime.output_dir)) if job.hydra_cfg is not None else None
        if getattr(job.status, "name", "") == "FAILED":
            error = job._return_value
            where = str(run_dir) if run_dir else None
            return Probe(config, None, run_dir=where, failed=f"{type(error).__name__}: {first_line(error)}")
        if run_dir is None:
            return Probe(config, None, failed="the launcher returned no run folder")
        return probe_from_results(config, run_dir, limited=limited)


# DataLoader's prefetch_factor=None is 2 batches a worker where it has workers
TORCH_DEFAULT_PREFETCH = 2


def _as_loaded(data: dict[str, Any]) -> dict[str, Any]:
    """The data settings as the DataLoader applies them: with workers, prefetch=off (None) loads as
    data.prefetch_factor=2 does (an outside model's tune kept the factor 2 on one probe, 1.13x, just
    after prefetch=off, the same loader, had measured 1.02x [0.96-1.09] over four); without, None is no
    prefetching and 2 a background thread's two batches, so they stay apart."""
    workers = data.get("num_workers")
    if isinstance(workers, int) and workers > 0 and data.get("prefetch_factor") is None:
        return data | {"prefetch_factor": TORCH_DEFAULT_PREFETCH}
    return data
