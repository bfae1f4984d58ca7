"""Each optimization axis is a config group whose options change what they should."""

import pytest
import torch
from hydra.utils import instantiate
from torch.utils.data import DataLoader

from segperf.config import CONFIG_DIR, available_cores
from segperf.data.prefetch import ThreadPrefetchLoader
from segperf.data.resumable import ResumableLoader
from segperf.training.trainer import build_trainer
from tests.conftest import compose_config

# group -> option -> (config key, expected value). Every option file in conf/ must be listed.
AXES = {
    "workers": {"off": ("data.num_workers", 0), "auto": ("data.num_workers", available_cores())},
    "prefetch": {"off": ("data.prefetch_factor", None), "on": ("data.prefetch_factor", 4)},
    "pin": {"off": ("data.pin_memory", False), "on": ("data.pin_memory", True)},
    "upsample": {"upconv": ("model.net.upsample", "upconv"), "deconv": ("model.net.upsample", "deconv")},
    "memory_format": {
        "nchw": ("model.memory_format", "nchw"),
        "channels_last": ("model.memory_format", "channels_last"),
    },
    "compile": {"off": ("model.compile", False), "on": ("model.compile", True)},
    "precision": {
        "fp32": ("trainer.precision", "32-true"),
        "bf16": ("trainer.precision", "bf16-mixed"),
        "fp16": ("trainer.precision", "16-mixed"),
    },
    "decode": {"full": ("data.decode", "full"), "reduced": ("data.decode", "reduced")},
    "cache": {"off": ("data.cache", "off"), "memory": ("data.cache", "memory"), "device": ("data.cache", "device")},
    "augment": {"off": ("data.augment", "off"), "basic": ("data.augment", "basic")},
}
BASELINE = {group: next(iter(options)) for group, options in AXES.items()}
FAST = {
    "workers": "auto",
    "prefetch": "on",
    "pin": "on",
    "upsample": "deconv",
    "memory_format": "channels_last",
    "compile": "on",
    "precision": "bf16",
    "decode": "reduced",
    "cache": "memory",
    "augment": "off",  # quality, not speed
}


def select(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def test_every_option_file_in_conf_is_covered_by_these_tests():
    on_disk = {group: {p.stem for p in (CONFIG_DIR / group).glob("*.yaml")} for group in AXES}
    assert on_disk == {group: set(options) for group, options in AXES.items()}


def test_no_option_is_named_by_a_bare_number_which_hydra_would_refuse():
    names = [p.stem for group in AXES for p in (CONFIG_DIR / group).glob("*.yaml")]
    assert not [n for n in names if n.lstrip("-").replace(".", "").isdigit()]


@pytest.mark.parametrize("group,option", [(g, o) for g, options in AXES.items() for o in options], ids=lambda v: str(v))
def test_each_option_sets_its_key_and_nothing_else(group, option):
    key, expected = AXES[group][option]
    cfg = compose_config(f"{group}={option}")
    assert select(cfg, key) == expected
    for other, other_option in BASELINE.items():  # the other axes stay at their baseline
        if other != group:
            other_key, other_value = AXES[other][other_option]
            assert select(cfg, other_key) == other_value


def test_defaults_are_the_baseline_with_every_optimization_off():
    cfg = compose_config()
    for group, option in BASELINE.items():
        key, expected = AXES[group][option]
        assert select(cfg, key) == expected, group


def test_opt_all_turns_every_axis_to_its_fast_setting():
    cfg = compose_config("+opt=all")
    for group, option in FAST.items():
        key, expected = AXES[group][option]
        assert select(cfg, key) == expected, group


def test_command_line_axis_wins_over_the_opt_all_preset():
    cfg = compose_config("+opt=all", "compile=off", "precision=fp32")
    assert cfg.model.compile is False
    assert cfg.trainer.precision == "32-true"
    assert cfg.data.pin_memory is True


def test_size_seed_is_the_seed_studys_run_size():
    cfg = compose_config("size=seed")
    assert (cfg.train_images, cfg.val_images, cfg.batch_size, cfg.val_every_images) == (3000, 60, 6, 500)
    assert cfg.data.train_images == 3000 and cfg.data.batch_size == 6


def test_exact_loader_numbers_stay_sweepable_through_the_underlying_keys():
    cfg = compose_config("data.num_workers=3", "data.prefetch_factor=2")
    assert (cfg.data.num_workers, cfg.data.prefetch_factor) == (3, 2)


# -- the settings reach the objects that use them ----------------------------------------


def loaders(cfg):
    """The train loader inside its resume wrapper, and the val loader."""
    dm = instantiate(cfg.data)
    dm.setup("fit")
    train = dm.train_dataloader()
    assert isinstance(train, ResumableLoader)
    return train.loader, dm.val_dataloader()


def test_pin_on_reaches_the_dataloaders(tiny_cfg):
    for loader in loaders(tiny_cfg("pin=on")):
        assert isinstance(loader, DataLoader) and loader.pin_memory is True
    assert all(loader.pin_memory is False for loader in loaders(tiny_cfg("pin=off")))


def test_workers_auto_reaches_the_dataloader_with_persistent_workers(tiny_cfg):
    train, val = loaders(tiny_cfg("workers=auto"))
    assert train.num_workers == val.num_workers == available_cores()
    assert train.persistent_workers is True


def test_prefetch_on_sets_dataloader_prefetch_with_workers_and_a_thread_without(tiny_cfg):
    train, _ = loaders(tiny_cfg("prefetch=on", "data.num_workers=2"))
    assert isinstance(train, DataLoader) and train.prefetch_factor == 4
    train, _ = loaders(tiny_cfg("prefetch=on"))
    assert isinstance(train, ThreadPrefetchLoader) and train.depth == 4 and train.loader.num_workers == 0
    train, _ = loaders(tiny_cfg("prefetch=off"))
    assert isinstance(train, DataLoader) and train.prefetch_factor is None


def test_data_pipeline_groups_and_cold_cache_reach_the_datamodule(tiny_cfg):
    dm = instantiate(tiny_cfg("decode=reduced", "cache=device", "augment=basic", "cold_cache=true").data)
    assert (dm.decode, dm.cache, dm.augment, dm.cold_cache) == ("reduced", "device", "basic", True)
    dm = instantiate(tiny_cfg().data)
    assert (dm.decode, dm.cache, dm.augment, dm.cold_cache) == ("full", "off", "off", False)


def module_for(cfg):
    return instantiate(cfg.model)  # builds the net too (its _target_)


def test_upsample_deconv_reaches_the_model(tiny_cfg):
    net = module_for(tiny_cfg("upsample=deconv")).net
    assert any(isinstance(m, torch.nn.ConvTranspose2d) for m in net.modules())
    net = module_for(tiny_cfg("upsample=upconv")).net
    assert not any(isinstance(m, torch.nn.ConvTranspose2d) for m in net.modules())


@pytest.mark.parametrize("fmt,expected", [("channels_last", torch.channels_last), ("nchw", torch.contiguous_format)])
def test_memory_format_reaches_the_model_weights_and_the_batch(tiny_cfg, fmt, expected):
    cfg = tiny_cfg(f"memory_format={fmt}")
    module = module_for(cfg)
    assert module.net.stem.weight.is_contiguous(memory_format=expected)
    train, _ = loaders(cfg)
    image, mask = module.on_after_batch_transfer(next(iter(train)), 0)
    assert image.dtype == torch.float32 and image.shape == (4, 3, 64, 96)
    assert image.is_contiguous(memory_format=expected)
    assert mask.dtype == torch.long


def test_compile_on_compiles_the_net_in_place_keeping_checkpoint_keys(tiny_cfg):
    compiled = module_for(tiny_cfg("compile=on"))
    plain = module_for(tiny_cfg("compile=off"))
    assert compiled.net._compiled_call_impl is not None
    assert plain.net._compiled_call_impl is None
    assert compiled.state_dict().keys() == plain.state_dict().keys()


@pytest.mark.parametrize("option,expected", [("fp32", "32-true"), ("bf16", "bf16-mixed"), ("fp16", "16-mixed")])
def test_precision_reaches_the_trainer_as_asked_even_fp16_on_cpu(tiny_cfg, option, expected, tmp_path):
    cfg = tiny_cfg(f"precision={option}", "trainer.accelerator=cpu")
    trainer = build_trainer(cfg.trainer, logger=False, default_root_dir=tmp_path)
    assert trainer.precision == expected


@pytest.mark.parametrize("every,batch,interval", [(4, 4, 1), (10, 4, 2), (14, 4, 4), (1, 8, 1)])
def test_validation_runs_every_val_every_images_rounded_to_whole_batches(tiny_cfg, every, batch, interval):
    cfg = tiny_cfg(f"val_every_images={every}", f"batch_size={batch}")
    assert cfg.trainer.val_check_interval == interval
    assert build_trainer(cfg.trainer, logger=False).val_check_interval == interval


@pytest.mark.parametrize(
    "overrides,every",
    [
        (["size=demo"], 5),  # 80 steps: every 5, as short runs always were
        (["model=cnn", "data=mnist", "train_images=19200", "batch_size=64"], 15),  # 300 steps: 20 points
        (["model=cnn", "data=mnist", "size=mnist"], 46),  # an MNIST epoch, 938 steps
        (["train_images=1000000", "batch_size=4"], 50),  # never sparser than Lightning's default
        (["size=demo", "trainer.log_every_n_steps=1"], 1),  # the user's own value wins
    ],
)
def test_a_run_logs_about_twenty_times_every_5_to_50_steps(overrides, every):
    cfg = compose_config(*overrides)
    assert cfg.trainer.log_every_n_steps == every
    assert build_trainer(cfg.trainer, logger=False).log_every_n_steps == every


def test_reduced_precision_on_a_cpu_without_native_support_gets_a_notice():
    from segperf.training.trainer import precision_notice

    avx2_only = {"fma", "avx2"}
    assert "avx512_bf16" in precision_notice("bf16-mixed", "cpu", avx2_only)
    assert "avx512_fp16" in precision_notice("16-mixed", "cpu", avx2_only)
    assert precision_notice("bf16-mixed", "cpu", avx2_only | {"amx_bf16"}) is None
    assert precision_notice("32-true", "cpu", avx2_only) is None
    assert precision_notice("bf16-mixed", "gpu", avx2_only) is None


LADDER = ["0_baseline", "1_prefetch", "2_workers", "3_pin", "4_deconv", "5_channels_last", "6_compile", "7_bf16"]


@pytest.mark.slow  # composes every case (~2 s); `make test` (CI) runs it
def test_ladder_presets_add_one_optimization_per_step_on_top_of_the_previous():
    order = ["prefetch", "workers", "pin", "upsample", "memory_format", "compile", "precision"]
    assert sorted(p.stem for p in (CONFIG_DIR / "opt").glob("*.yaml")) == sorted([*LADDER, "all"])
    for step, preset in enumerate(LADDER):
        cfg = compose_config(f"+opt={preset}")
        for i, group in enumerate(order):
            option = FAST[group] if i < step else BASELINE[group]
            key, expected = AXES[group][option]
            assert select(cfg, key) == expected, (preset, group)
    # the seed's ladder ends with its seven axes on; opt=all adds the data-pipeline axes
    last, everything = compose_config("+opt=7_bf16", "decode=reduced", "cache=memory"), compose_config("+opt=all")
    assert last == everything
