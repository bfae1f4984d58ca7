"""The run's record: results.json and summary.txt whatever happens.

`RunRecord` is the bookkeeping around the recipe in segperf.training.run, as the
lightning-hydra-template's `task_wrapper` is around its `train()`: the recipe builds things and
hands them over (`record.trainer = ...`), and on leaving the `with`
block the record says how the run ended (completed, interrupted by Ctrl-C or SIGTERM, failed with
its error), fills in what was measured from whatever got built, and writes the files — once, on
rank 0, atomically. The exception itself goes on to the command line, which turns it into one
line for the user.
"""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from segperf.axes import training_axis_keys
from segperf.callbacks import InterruptCheckpoint, PerfMonitor, Terminated, TerminateOutsideTraining
from segperf.callbacks.validation_metrics import quality_section, validation_history
from segperf.config import plain_config
from segperf.data.filechecks import write_bad_files
from segperf.data.skips import warnings_line
from segperf.errors import explain, is_worker_error
from segperf.perf.machine_load import load_at_end, load_at_start
from segperf.perf.results import record_failure, write_json_atomic, write_record
from segperf.perf.summary import NOT_TRAINED, format_not_trained, format_run_summary
from segperf.quality import as_quality, declared, metric_names, of_results
from segperf.schema import check_settings
from segperf.training.adapt import adapt_to_machine, adjustment_notice
from segperf.training.distributed import DistributedJob, is_distributed
from segperf.training.resume import resume_checkpoint, resume_command

# runs started in this process so far: Hydra's basic launcher runs a sweep's jobs one after another
# in one process, and the first (results.json's process_job 0) pays the one-time costs (imports,
# allocator and kernel caches, the built-in data's first read), which the report checks for
_RUNS_IN_PROCESS = itertools.count()


class RunRecord:
    """`with RunRecord(cfg, run_dir) as record:` around one training run; see the module doc."""

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.results: dict[str, Any] = {"status": "failed", "dataset": {}, "train": {}, "quality": {}, "notices": []}
        self.results["config"] = plain_config(cfg)
        self._composed = cfg  # typed by the schema, whose range checks find each workload's by its type
        self.results["axes"] = axis_settings(self.results["config"])
        self.results["process_job"] = next(_RUNS_IN_PROCESS)
        # how busy the machine was around the run (others' CPU during it): the report flags a busy one
        self.results["machine_load"], self._cpu_start = load_at_start()
        self.monitor: PerfMonitor | None = None
        self.datamodule = self.module = self.trainer = self.workload = None
        self.callbacks: list[L.Callback] = []
        self.ckpt_path: Path | None = None
        self._job: DistributedJob | None = None

    def __enter__(self) -> RunRecord:
        return self

    def prepare(self) -> DictConfig:
        """Every bad value at once, before any work; then what this machine cannot do, and the
        checkpoint to resume from. Returns the plain config the run reads from here on."""
        check_settings(self._composed)
        cfg = OmegaConf.create(self.results["config"])  # plain: the schema has done its job
        self.results["adjusted"] = adapt_to_machine(cfg)
        self.ckpt_path = resume_checkpoint(self.run_dir) if cfg.resume else None
        for setting, change in self.results["adjusted"].items():
            self.notice(adjustment_notice(setting, change))
        if self.ckpt_path is not None:
            self.results["resumed"] = {"checkpoint": str(self.ckpt_path)}
            print(f"segperf: resuming {self.run_dir} from {self.ckpt_path.name}")
        self._job = DistributedJob()
        return cfg

    def use_callbacks(self, callbacks: list[L.Callback]) -> list[L.Callback]:
        """The run's callbacks; the SIGTERM guard among them is armed from now until the end."""
        self.callbacks = callbacks
        self.monitor = next((c for c in callbacks if isinstance(c, PerfMonitor)), None)
        if self.monitor is not None:
            self.monitor.hand_files_over()  # this record writes the run's files, after its last validation
        for callback in callbacks:
            if isinstance(callback, TerminateOutsideTraining):
                callback.install()
        return callbacks

    def span(self, phase: str):
        """Time a part of the run the Trainer does not see (PerfMonitor's `span`; nothing without one)."""
        return self.monitor.span(phase) if self.monitor is not None else nullcontext()

    def fit_called(self) -> None:
        """Trainer.fit is about to be called: PerfMonitor's set-up phase starts here, not at the
        fit's first hook, which comes after the strategy's and the data's preparation."""
        if self.monitor is not None:
            self.monitor.clock.mark("fit_called")

    def notice(self, text: str) -> None:
        """Said once, when it happens, and kept in results.json (and summary.txt's notes)."""
        print(f"segperf: note: {text}")
        self.results["notices"].append(text)

    def __exit__(self, kind, error, traceback) -> bool:
        results = self.results
        load_at_end(results["machine_load"], self._cpu_start)  # before the bookkeeping below adds its own load
        if self._job is None:  # stopped before any work (a bad setting, a missing checkpoint)
            if error is not None:
                record_failure(results, error)
            if not (self.run_dir / "results.json").exists():  # never overwrite an earlier run's record (resume=)
                write_json_atomic(self.run_dir / "results.json", results)
            return False
        stopped_by = next((c.signal for c in self.callbacks if isinstance(c, InterruptCheckpoint)), None)
        if error is None:
            results["status"] = "completed"
        elif stopped_by is not None:  # Lightning caught Ctrl-C / SIGTERM and saved a checkpoint
            results.update(status="interrupted", error=f"interrupted by {stopped_by}", interrupted_by=stopped_by)
        else:
            record_failure(results, error)
            if isinstance(error, Terminated):  # before the trainer ran
                results["error"], results["interrupted_by"] = "interrupted by SIGTERM", "SIGTERM"
            if is_worker_error(error):
                results["error"] = explain(error)  # the file, not the worker's traceback
        for callback in self.callbacks:
            if isinstance(callback, TerminateOutsideTraining):
                callback.uninstall()
        for callback in self.callbacks:  # PerfMonitor; profile=ops, profile=counters: their sections
            if hasattr(callback, "record"):
                callback.record(results)
        self._fill_in()
        self._write(error)
        self._close_loggers()
        # Lightning turns a handled Ctrl-C into SystemExit: the run is recorded, nothing to raise
        return isinstance(error, SystemExit) and stopped_by is not None

    def _close_loggers(self) -> None:
        """Finalize the trainer's loggers again. Lightning finalizes them when fit (and the last
        validate) returns; what this record logs after that (PerfMonitor's scalars, histograms and
        resource series) makes TensorBoard's closed writer open a new event file with a writer
        thread of its own, which nothing would close: its events waited for the thread's next
        timed flush, and the thread outlived the run (a test process running runs one after another
        collected them, and its next DataLoader worker then took 5 s to shut down)."""
        status = "success" if self.results.get("status") == "completed" else "failed"
        for logger in self.trainer.loggers if self.trainer is not None else []:
            logger.finalize(status)

    def _fill_in(self) -> None:
        """What the run did, from whatever got built before it ended."""
        results, cfg, trainer, module = self.results, self.results["config"], self.trainer, self.module
        if self.workload is not None:
            results["dataset"] = self.workload.dataset_summary() or results["dataset"]
            self._note_run_skips(results["dataset"])
            # a user's workload: the loaders segperf rebuilt, and what could not apply (said, never silent)
            for setting, change in self.workload.record(results).items():
                results["notices"].append(adjustment_notice(setting, change))
        if self.never_trained:  # stopped by its data check (or anything else) before a training step
            results["verdict"] = {"kind": "unknown", "text": NOT_TRAINED}
        if module is not None and getattr(module, "compile_fallback", None):
            change = {
                "requested": True,
                "used": False,
                "reason": f"torch.compile failed at its first call: {module.compile_fallback}",
            }
            results["adjusted"]["model.compile"] = change
            results["notices"].append(adjustment_notice("model.compile", change))
        if trainer is None:
            return
        world = trainer.world_size  # under DDP each rank trains on train_images // world (segperf.data.base)
        per_rank, batch_size = cfg["train_images"] // world, cfg["batch_size"]
        results["progress"] = {
            "steps_done": trainer.global_step,
            "steps_total": -(-per_rank // batch_size),
            "images_done": min(trainer.global_step * batch_size, per_rank) * world,
            "images_total": per_rank * world,
        }
        if "resumed" in results:
            results["resumed"]["from_step"] = trainer.global_step - results["train"].get("steps", 0)
        if results["status"] == "interrupted" and any((self.run_dir / "checkpoints").glob("*.ckpt")):
            results["resume_command"] = resume_command(self.run_dir)
        results["device"] = str(trainer.strategy.root_device)
        results["precision"] = trainer.precision
        self._quality(module)

    def _quality(self, module: L.LightningModule | None) -> None:
        """results.json's `quality`: each validation's metrics (validation_history: the same as
        PerfMonitor's) and the one the report and the tuner judge the run by, as declared
        (segperf.quality.declared: the model config's `quality`, else the module's own), else the
        default rule, said in a notice."""
        own = self.monitor.validations if self.monitor is not None else None
        history = validation_history(self.trainer, own) if self.trainer is not None else []
        choice = self.workload.quality_choice if self.workload is not None else None
        chosen = declared(module, choice)
        section = self.results["quality"] = quality_section(history, chosen)
        if chosen is not None and section and chosen.key not in section:
            logged = ", ".join(metric_names(section))
            named_in_config = as_quality(choice) is not None
            where = f"model.quality.metric={chosen.metric}" if named_in_config else f"{type(module).__name__}.quality"
            self.notice(f"{where}: the module logged no such validation metric (it logged {logged})")
        elif chosen is None and section.get("metric"):
            direction = "lower" if section["mode"] == "min" else "higher"
            self.notice(
                f"quality: the model config names no quality.metric, so the report and the tuner judge this run by "
                f"{section['metric']} ({direction} is better); name the one you mean in it: "
                "quality: {metric: val_acc, mode: max}"
            )

    @property
    def never_trained(self) -> bool:
        """A failed run without a training step: its phases and rates measure set-up only, and a
        verdict on them ("overhead-bound: 100% of the training loop in validation ...") would
        describe a run that never ran."""
        trainer = self.trainer
        return self.results["status"] == "failed" and (trainer is None or trainer.global_step == 0)

    def _note_run_skips(self, dataset: dict[str, Any]) -> None:
        """The end-of-run word on files that failed after the check (the check's were warned of
        at set-up) and on the image library's warnings met while loading."""
        late = [s for s in dataset.get("skipped", []) if s.get("stage", "check") != "check"]
        if late:
            files = len({s["path"] for s in late})
            self.notice(
                f"data.on_bad_sample=skip: {files} file{'s' if files != 1 else ''} failed to decode during the run "
                "and the next sample took each one's place (batches kept their size); each is in results.json "
                f"(dataset.skipped, with reason and stage). First: {late[0]['path']}: {late[0]['reason']} "
                f"({late[0]['stage']}). data.check=decode finds such files before training."
            )
        warned = [w for w in dataset.get("image_warnings", []) if w.get("stage") != "check"]
        if line := warnings_line(warned):
            self.notice(f"while loading, {line}")

    def _write(self, error: BaseException | None = None) -> None:
        """One run, one record: under DDP every rank runs train() and sends its row to rank 0,
        which alone writes results.json, summary.txt, bad_files.txt (every bad file of the data,
        also of a check that stopped the run with `error`) and the run's last TensorBoard entries."""
        results, trainer = self.results, self.trainer
        completed = results["status"] == "completed"
        if trainer is not None and self.monitor is not None and completed and is_distributed():
            try:
                self.monitor.gather(trainer, results)  # the same rows, straggler and gather as a user's run
            except Exception as error:  # a rank gone: keep rank 0's own record
                self.notice(f"per-rank measurement not gathered ({type(error).__name__}: {error})")
        self._job.close()
        if not (trainer.is_global_zero if trainer is not None else rank_zero_only.rank == 0):
            return
        if trainer is not None:
            log_hparams(trainer, results)
        write_bad_files(self.run_dir, results["dataset"], error)  # before results.json: it completes dataset
        # the error says what stopped a run that never trained: no tables about a run that never ran
        summary = format_not_trained(results) if self.never_trained else format_run_summary(results)
        write_record(self.run_dir, results, summary)
        if not self.never_trained:
            print(summary, end="")
        print(f"Results: {self.run_dir / 'results.json'}")


def axis_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The value each optimization axis resolved to: what a sweep varies, and what TensorBoard's
    HParams view and the report group runs by. None for a key the workload does not have."""
    plain = OmegaConf.create(config)
    return {axis: OmegaConf.select(plain, key) for axis, key in training_axis_keys().items()}


def log_hparams(trainer: L.Trainer, results: dict[str, Any]) -> None:
    """Axis settings with the run's outcome, once at the end, for TensorBoard's HParams view."""
    quality = results["quality"]
    judged = of_results(quality)
    names = sorted(metric_names(quality), key=lambda name: judged is None or name != judged.key)
    metrics = {
        "hp/images_per_s": results["train"].get("images_per_s"),
        # every validation metric under its own name (the U-Net's hp/val_dice ...), the judged one first
        **{f"hp/{name}": quality.get(name) for name in names},
        "hp/data_wait_fraction": (results.get("phases") or {}).get("data_wait", {}).get("fraction"),
    }
    params = {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in results["axes"].items()}
    for logger in trainer.loggers:
        logger.log_hyperparams(params, {k: v for k, v in metrics.items() if v is not None})
        logger.save()
