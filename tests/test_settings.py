"""Bad settings stop before any work with one line each; settings this machine cannot honour
adapt (recorded) or stop, as the table of docs/troubleshooting.md says."""

import json
import re

import pytest
from hydra.errors import ConfigCompositionException

from segperf.config import plain_config
from segperf.schema import SettingsError, check_settings, problems_in
from segperf.training import adapt
from segperf.training.run import train
from tests.conftest import compose_config


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("data.num_workers=-1", r"data.num_workers=-1: must be >= 0"),
        ("data.prefetch_factor=0", r"data.prefetch_factor=0: must be >= 1 batches, or null"),
        ("trainer.precision=fp8", r"trainer.precision='fp8': use one of 32-true .*bf16-mixed.*16-mixed"),
        ("batch_size=0", r"batch_size=0: must be a whole number >= 1"),
        ("train_images=-3", r"train_images=-3: must be a whole number >= 1"),
        ("val_images=0", r"val_images=0: must be a whole number >= 1"),
        ("data.holdout_frac=1.5", r"data.holdout_frac=1.5: must be between 0 and 1"),
        ("data.holdout_frac=0", r"data.holdout_frac=0.0: must be between 0 and 1"),
        ("perf.sample_interval_s=0", r"perf.sample_interval_s=0.0: must be > 0"),
        ("warmup_steps=-1", r"warmup_steps=-1: must be >= 0"),
    ],
)
def test_an_out_of_range_value_is_named_with_what_is_allowed(override, expected):
    problems = problems_in(compose_config(override))
    assert len(problems) == 1, problems
    assert problems[0].count("\n") == 0
    assert re.search(expected, problems[0]), problems[0]


def test_each_workloads_range_checks_apply_to_its_own_config_only():
    assert problems_in(compose_config("data.synthetic.cars=1")) == [
        "data.synthetic.cars=1: must be >= 2 (one to train on, one held out)"
    ]
    mnist = problems_in(compose_config("data=mnist", "model=cnn", "data.builtin.train=0", "model.net.dropout=1"))
    assert [p.split(":")[0] for p in mnist] == ["data.builtin.train=0", "model.net.dropout=1.0"]
    # the U-Net's input-size rule is the U-Net's (its check_input_size), not the config check's
    assert problems_in(compose_config("data.height=250")) == []


def test_the_unet_names_each_input_side_it_cannot_take():
    from segperf.errors import InputSizeError
    from segperf.model import UNet

    with pytest.raises(InputSizeError) as caught:
        UNet().check_input_size(250, 0)
    lines = str(caught.value).splitlines()
    assert [line.split(":")[0] for line in lines] == ["data.height=250", "data.width=0"]
    assert all("positive multiple of 16" in line for line in lines)


@pytest.mark.parametrize(
    ("override", "valid"),
    [
        ("data.cache=disk", "off, memory, device"),
        ("data.decode=fast", "full, reduced"),
        ("data.augment=strong", "off, basic"),
        ("data.on_bad_sample=ignore", "raise, skip"),
        ("model.net.upsample=bilinear", "upconv, deconv"),
        ("model.memory_format=nhwc", "nchw, channels_last"),
        ("trainer.accelerator=tpu", "auto, cpu, gpu, cuda, mps"),
    ],
)
def test_an_unknown_option_is_rejected_while_composing_with_the_valid_ones(override, valid):
    key, value = override.split("=")
    with pytest.raises(ConfigCompositionException, match=f"override {re.escape(override)}") as caught:
        compose_config(override)
    reason = str(caught.value.__cause__)
    assert f"Invalid value '{value}', expected one of [{valid}]" in reason
    assert f"full_key: {key}" in reason


def test_the_options_the_code_compares_with_plain_strings_arrive_as_such():
    # the schema's enums equal, and print as, the strings users type; the record has plain strings
    data = compose_config("cache=memory", "decode=reduced", "augment=basic").data
    assert (data.cache, data.decode, data.augment, data.on_bad_sample) == ("memory", "reduced", "basic", "raise")
    assert f"{data.cache} {data.decode}" == "memory reduced"
    record = plain_config(data)
    assert [type(record[key]) for key in ("cache", "decode", "augment", "on_bad_sample")] == [str] * 4


def test_the_default_config_and_every_fast_setting_are_valid():
    assert problems_in(compose_config()) == []
    assert problems_in(compose_config("+opt=all", "size=seed")) == []


def test_every_bad_value_is_listed_at_once():
    with pytest.raises(SettingsError) as caught:
        check_settings(compose_config("batch_size=0", "data.num_workers=-2", "data.holdout_frac=1"))
    assert len(caught.value.problems) == 3
    assert str(caught.value).splitlines() == caught.value.problems


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("batch_size=abc", "batch_size=abc"),  # wrong type: Hydra refuses while composing
        ("data.num_workers=2.5", "data.num_workers=2.5"),
        ("data.num_worker=2", "data.num_worker"),  # misspelt key
        ("trainer.precison=bf16-mixed", "trainer.precison"),
    ],
)
def test_a_wrong_type_or_unknown_key_is_refused_by_the_schema_while_composing(override, expected):
    with pytest.raises(ConfigCompositionException, match=expected.replace(".", r"\.")):
        compose_config(override)


def test_bad_settings_stop_a_run_before_any_work_and_record_why(tmp_path):
    cfg = compose_config("batch_size=0", "data.holdout_frac=2")
    with pytest.raises(SettingsError, match="batch_size=0"):
        train(cfg, tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed" and "data.holdout_frac=2.0" in results["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no checkpoint, no logs


# -- what this machine cannot do ---------------------------------------------------------------


def test_pin_memory_without_a_cuda_device_is_turned_off_and_recorded(monkeypatch):
    monkeypatch.setattr(adapt, "_has_cuda", lambda: False)
    cfg = compose_config("pin=on")
    adjusted = adapt.adapt_to_machine(cfg)
    assert cfg.data.pin_memory is False
    assert adjusted == {
        "data.pin_memory": {"requested": True, "used": False, "reason": adjusted["data.pin_memory"]["reason"]}
    }
    assert "GPU" in adjusted["data.pin_memory"]["reason"]


def test_pin_memory_with_a_cuda_device_is_kept(monkeypatch):
    monkeypatch.setattr(adapt, "_has_cuda", lambda: True)
    cfg = compose_config("pin=on")
    assert adapt.adapt_to_machine(cfg) == {} and cfg.data.pin_memory is True


@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_asking_for_a_gpu_where_there_is_none_stops_with_the_fix(monkeypatch, accelerator):
    monkeypatch.setattr(adapt, "_has_cuda", lambda: False)
    with pytest.raises(SettingsError, match=f"trainer.accelerator={accelerator}: .*no CUDA GPU.*accelerator=auto"):
        adapt.adapt_to_machine(compose_config(f"trainer.accelerator={accelerator}"))


def test_a_cpu_run_with_pin_on_records_the_adjustment_in_results(monkeypatch, tmp_path, tiny_cfg):
    monkeypatch.setattr(adapt, "_has_cuda", lambda: False)
    results = train(tiny_cfg("pin=on", "train_images=4"), tmp_path)
    assert results["status"] == "completed"
    assert results["adjusted"]["data.pin_memory"]["used"] is False
    assert results["axes"]["pin"] is True  # what was asked: the sweep axis
    assert any("data.pin_memory=True adjusted to False" in n for n in results["notices"])
    assert "data.pin_memory=True adjusted to False" in (tmp_path / "summary.txt").read_text()


# -- what the user sees on the command line -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "expected_lines"),
    [
        (
            ["batch_size=0", "data.num_workers=-1"],
            ["segperf: error: batch_size=0: must be", "segperf: error: data.num_workers=-1: must be >= 0"],
        ),
        (["data.root=/nowhere/carvana"], ["segperf: error: data.root=/nowhere/carvana does not exist"]),
        # the U-Net's rule, checked by the U-Net before any work
        (["data.height=250"], ["segperf: error: data.height=250: the U-Net pools 4 times"]),
        (["trainer.accelerator=gpu"], ["segperf: error: trainer.accelerator=gpu: torch sees no CUDA GPU"]),
    ],
)
def test_the_command_line_prints_one_line_per_problem_and_exits_2_without_a_traceback(tmp_path, args, expected_lines):
    if "trainer.accelerator=gpu" in args and __import__("torch").cuda.is_available():
        pytest.skip("this machine has a GPU")
    from tests.conftest import run_cli

    done = run_cli([*args, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("segperf: error: ")]
    assert len(errors) == len(expected_lines)
    for line, expected in zip(errors, expected_lines, strict=True):
        assert line.startswith(expected)
    assert "Traceback" not in done.stderr + done.stdout
