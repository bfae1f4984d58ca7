"""One place says which logged metric is a run's quality and whether higher or lower is better
(segperf.quality): each module declares it (or the model config does), the run records it, and
the summary, the report, the tuner and TensorBoard's HParams read that record, never a metric name
of their own. A run that is not an image workload is spoken of in samples, never Dice."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.transformer import LightningTransformer
from torch.utils.data import DataLoader, Dataset

from segperf import PerfMonitor
from segperf.model.cnn import ClassificationModule
from segperf.model.module import SegmentationModule
from segperf.perf.summary import format_run_summary
from segperf.perf.verdict import verdict
from segperf.quality import LEGACY, Quality, declared, of_results
from segperf.training.quality import quality_section
from segperf.training.record import log_hparams
from segperf.tune.runner import probe_from_results
from tests.test_report import table_rows, write_sweep
from tests.test_report_decisions import by_label, report, run

NOT_AN_IMAGE_WORKLOAD = ("image", "dice", "pixel accuracy")


def an_lm_run(quality: dict) -> dict:
    """results.json as PerfMonitor writes it for a user's language model on the CPU: no dataset
    record, no config, the verdict in DataLoader and Trainer knobs."""
    phases = {
        "data_wait": {"calls": 14, "wall_s": 0.05, "fraction": 0.01},
        "train_step": {"calls": 14, "wall_s": 4.0, "fraction": 0.9},
        "warmup": {"calls": 2, "wall_s": 0.4, "fraction": 0.09},
    }
    settings = {"trainer": {"precision": "32-true"}, "hints": {"workers": 2}}
    settings["dataloader"] = {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "batch_size": 4}
    judged = verdict(phases, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu", settings=settings)
    return {
        "status": "completed",
        "dataset": {},
        "train": {"images": 64, "steps": 16, "images_per_s": 30.0, "val_images_per_s": None},
        "quality": quality,
        "phases": phases,
        "verdict": judged,
        "notices": [],
    }


def test_a_language_models_summary_speaks_of_samples_and_of_no_dice_or_pixel_accuracy():
    summary = format_run_summary(an_lm_run({}))  # Lightning's demo Transformer: no validation
    assert not [word for word in NOT_AN_IMAGE_WORKLOAD if word in summary.lower()], summary
    assert "Trained on              64 samples in 16 steps" in summary and "Train samples/s" in summary
    assert "Quality                 none: the module logged no validation metric" in summary.splitlines()
    assert "fewer FLOPs per sample" in summary  # the CPU verdict's advice


def test_the_summary_shows_each_logged_metric_under_its_own_name_the_judged_one_first():
    quality = {"val_ppl": 35.2, "val_loss": 3.56}  # PerfMonitor's record: what validation logged
    lines = format_run_summary(an_lm_run(quality)).splitlines()
    rows = [line for line in lines if line.startswith("val_")]
    # nothing declared: the default rule judges by the loss, lower is better
    assert rows == ["val_loss (min: the run's quality) 3.5600", "val_ppl                 35.2000"]
    declared_ppl = quality | Quality("val/ppl", "min").record()
    rows = [line for line in format_run_summary(an_lm_run(declared_ppl)).splitlines() if line.startswith("val_")]
    assert rows[0] == "val_ppl (min: the run's quality) 35.2000"


class RandomTokens(Dataset):
    """A user's language-model data: (input tokens, next tokens), 16 tokens of a 50-word vocabulary."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int):
        tokens = torch.randint(0, 50, (17,), generator=torch.Generator().manual_seed(i))
        return tokens[:-1], tokens[1:]


class TinyLanguageModel(LightningTransformer):
    """Lightning's own demo Transformer, on tokens it need not download."""

    def prepare_data(self) -> None:
        pass

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomTokens(), batch_size=4)


def test_lightnings_demo_transformer_with_perf_monitor_is_summarized_in_samples(tmp_path):
    torch.manual_seed(0)
    options = dict(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer = L.Trainer(callbacks=[PerfMonitor(dirpath=tmp_path, peak_probe=False)], accelerator="cpu", **options)
    trainer.fit(TinyLanguageModel(vocab_size=50))
    summary = (tmp_path / "summary.txt").read_text()
    assert not [word for word in NOT_AN_IMAGE_WORKLOAD if word in summary.lower()], summary
    assert "samples in 6 steps" in summary and "no validation metric" in summary


def test_segperfs_own_modules_declare_their_quality_and_older_records_read_the_same():
    assert (SegmentationModule.quality.key, SegmentationModule.quality.mode) == ("val_dice", "max")
    assert (ClassificationModule.quality.key, ClassificationModule.quality.mode) == ("val_accuracy", "max")
    # a record written before runs named their metric is judged as its module declares
    for module, legacy in zip((SegmentationModule, ClassificationModule), LEGACY, strict=True):
        assert (legacy.key, legacy.mode, legacy.name) == (module.quality.key, module.quality.mode, module.quality.label)
    assert of_results({"val_pixel_accuracy": 0.9, "val_dice": 0.8, "val_loss": 0.2}) == LEGACY[0]
    assert of_results({"val_accuracy": 0.9, "val_loss": 0.2}) == LEGACY[1]
    assert of_results({}) is None


def test_the_model_config_wins_over_the_modules_declaration_and_an_unrelated_attribute_is_no_declaration():
    module = SimpleNamespace(quality=Quality("val/acc", "max"))
    assert declared(module) == Quality("val/acc", "max")
    assert declared(module, {"metric": "val/loss", "mode": "min"}) == Quality("val/loss", "min")
    assert declared(SimpleNamespace(quality=0.93)) is None  # a user's own `quality` attribute, not ours
    assert declared(SimpleNamespace(quality={"metric": "val_f1"})) == Quality("val_f1", "max")
    with pytest.raises(ValueError, match="mode is max"):
        Quality("val/loss", "lowest")


# each validation's Dice and loss of two configurations, over three seeds: workers=auto has a
# lower Dice and a lower loss than the baseline
HISTORIES = {
    "workers=off": [(0.90, 0.30), (0.91, 0.31), (0.89, 0.29)],
    "workers=auto": [(0.80, 0.20), (0.82, 0.21), (0.81, 0.22)],
}


def sweep_declaring(root: Path, declaration: Quality) -> Path:
    """A sweep whose runs recorded their quality as a module declaring `declaration` does."""
    jobs, job = {}, 0
    for seed in range(3):
        for workers, (label, values) in enumerate(HISTORIES.items()):
            dice, loss = values[seed]
            history = [{"step": 8, "val_dice": dice + 0.05, "val_loss": loss + 0.1}, {"step": 16, "val_dice": dice}]
            history[-1]["val_loss"] = loss
            quality = quality_section(history, declaration)
            jobs[f"{job}_seed={seed},{label}"] = run(
                2.0 + workers, seed=seed, axes={"workers": workers}, quality=quality
            )
            job += 1
    return write_sweep(root, jobs)


@pytest.mark.parametrize(
    "declaration, header, auto_worse",
    [
        (SegmentationModule.quality, "val Dice", True),  # its Dice fell
        (Quality("val/loss", "min"), "val_loss (lower is better)", False),  # its loss fell: better
        (Quality("val/loss", "max"), "val_loss", True),  # the same numbers, judged the other way round
    ],
)
def test_the_declared_metric_and_mode_are_what_the_report_and_the_tuner_judge(
    tmp_path, declaration, header, auto_worse
):
    sweep = sweep_declaring(tmp_path / "s", declaration)
    text, data = report(sweep, tmp_path / "out")
    auto = by_label(data)["workers=auto"]["quality"]
    assert (auto["metric"], auto["mode"], auto["worse_than_baseline"]) == (
        declaration.key,
        declaration.mode,
        auto_worse,
    )
    assert text.split("## Training", 1)[1].splitlines()[2].split(" | ")[-2].strip() == header
    assert table_rows(text, "## Training")["workers=auto"][10].endswith(")") == auto_worse  # "(lower)"/"(higher)"
    # the tuner's guard reads the same record the same way
    probe = probe_from_results(("workers=auto",), next(sweep.glob("1_*")))
    recorded = json.loads((next(sweep.glob("1_*")) / "results.json").read_text())["quality"]
    assert (probe.quality_metric, probe.lower_is_better) == (declaration.key, declaration.lower_is_better)
    assert probe.metric_value == recorded[declaration.key]


def test_tensorboards_hparams_get_every_logged_metric_under_its_own_name():
    logged = []
    logger = SimpleNamespace(log_hyperparams=lambda params, metrics: logged.append(metrics), save=lambda: None)
    trainer = SimpleNamespace(loggers=[logger])
    quality = quality_section([{"step": 4, "val_ppl": 35.2, "val_loss": 3.56}], Quality("val/ppl", "min"))
    log_hparams(trainer, {"train": {"images_per_s": 30.0}, "quality": quality, "axes": {"batch_size": 4}})
    assert logged == [{"hp/images_per_s": 30.0, "hp/val_ppl": 35.2, "hp/val_loss": 3.56}]


def test_a_run_that_validates_40000_times_keeps_a_bounded_history_with_its_first_and_last():
    from types import SimpleNamespace

    from segperf.callbacks.validation_metrics import HISTORY_MAX, ValidationMetrics, quality_section

    keeper = ValidationMetrics()
    trainer = SimpleNamespace(sanity_checking=False, global_step=0, callback_metrics={})
    for step in range(1, 40_001):  # a million steps validated every 25
        trainer.global_step, trainer.callback_metrics = step * 25, {"val_acc": torch.tensor(step / 40_000)}
        keeper.on_validation_end(trainer, None)
    history = keeper.history
    assert len(history) <= HISTORY_MAX + 1
    assert history[0]["step"] == 25 and history[-1]["step"] == 1_000_000
    steps = [entry["step"] for entry in history]
    assert steps == sorted(steps) and max(b - a for a, b in zip(steps, steps[1:], strict=False)) <= 4 * 1_000_000 / len(
        steps
    )
    section = quality_section(history, None)
    assert section["first_val_acc"] == history[0]["val_acc"] and section["val_acc"] == 1.0


def test_a_resumed_long_history_goes_on_at_its_stride():
    from types import SimpleNamespace

    from segperf.callbacks.validation_metrics import ValidationMetrics

    def validate(keeper, steps):
        for step in steps:
            trainer = SimpleNamespace(sanity_checking=False, global_step=step, callback_metrics={"val_acc": step})
            keeper.on_validation_end(trainer, None)

    whole, first = ValidationMetrics(), ValidationMetrics()
    validate(whole, range(1, 3001))
    validate(first, range(1, 1501))
    resumed = ValidationMetrics()
    resumed.load_state_dict(first.state_dict())  # through a checkpoint, halfway
    validate(resumed, range(1501, 3001))
    assert [e["step"] for e in resumed.history] == [e["step"] for e in whole.history]
