"""What the tuner may change (segperf.tune.space), held against the real composed configs."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from segperf.config import CONFIG_DIR, register_resolvers
from segperf.tune import space

UNET = []  # the default workload: the U-Net on Carvana
CNN = ["model=cnn", "data=mnist"]
PIPELINE = {"upsample", "decode", "cache"}  # the U-Net's and Carvana's own speed axes


def composed(*overrides: str):
    """The train config as the tune composes it, with hydra.runtime.choices."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=list(overrides), return_hydra_config=True)
    return cfg, dict(cfg.hydra.runtime.choices)


@pytest.fixture(scope="module")
def unet():
    return composed(*UNET)


@pytest.fixture(scope="module")
def cnn():
    return composed(*CNN)


def names(axes):
    return [axis.name for axis in axes]


def test_the_unet_on_carvana_has_its_pipeline_axes_and_the_cnn_on_mnist_has_none(unet, cnn):
    unet_axes, cnn_axes = names(space.axes(*unet, cores=2)), names(space.axes(*cnn, cores=2))
    assert PIPELINE <= set(unet_axes)
    assert not PIPELINE & set(cnn_axes)
    shared = {"precision", "compile", "workers", "threads", "prefetch", "memory_format", "pin"}
    assert set(unet_axes) == shared | PIPELINE and set(cnn_axes) == shared


def test_a_plain_container_of_the_config_gives_the_same_axes(unet):
    cfg, choices = unet
    register_resolvers()
    plain = OmegaConf.to_container(cfg, resolve=False)
    assert space.axes(plain, choices, cores=4) == space.axes(cfg, choices, cores=4)


def test_group_options_are_the_groups_files_and_the_start_composed_option_is_the_axis_start(unet):
    by_name = {axis.name: axis for axis in space.axes(*unet, cores=2)}
    for group in ("cache", "decode", "precision", "compile", "upsample", "memory_format", "pin"):
        files = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
        assert [o for (o,) in by_name[group].options] == [f"{group}={name}" for name in files]
    assert by_name["workers"].start == ("workers=off",) and by_name["precision"].start == ("precision=fp32",)
    assert {a.name for a in by_name.values() if a.changes_learning} == {"precision", "upsample", "decode"}
    assert "augment" not in by_name  # a recipe choice, not a speed axis: never traded for speed


@pytest.mark.parametrize("cores", [1, 2, 3, 16])
def test_numeric_knobs_stay_within_the_cores_and_never_repeat_what_a_group_option_sets(unet, cores):
    by_name = {axis.name: axis for axis in space.axes(*unet, cores=cores)}

    def numbers(name, key):
        return [int(o.split("=")[1]) for (o,) in by_name[name].options if o.startswith(f"{key}=")]

    workers, threads = numbers("workers", "data.num_workers"), numbers("threads", "num_threads")
    assert all(1 <= n < cores for n in workers + threads)  # 0 is workers=off, `cores` is workers=auto / threads=all
    assert 1 not in threads  # threads=one
    assert cores // 2 not in threads  # threads=half
    options = [o for axis in by_name.values() for (o,) in axis.options]
    assert len(options) == len(set(options))
    if cores <= 2:  # threads=half sets what threads=one sets: one of them is tried
        assert len({"threads=one", "threads=half"} & set(options)) == 1
    if cores == 16:
        assert workers == [2, 4, 8] and threads == [2, 4]


def test_batch_size_is_an_axis_only_when_asked(unet):
    cfg, choices = unet
    assert "batch_size" not in names(space.axes(cfg, choices, cores=2))
    [axis] = [a for a in space.axes(cfg, choices, cores=2, batch_size=True) if a.name == "batch_size"]
    size = cfg.batch_size
    assert axis.options == ((f"batch_size={size // 2}",), (f"batch_size={size * 2}",), (f"batch_size={size * 4}",))
    assert axis.changes_learning and axis.start == (f"batch_size={size}",)


@pytest.mark.parametrize("cores", [2, 16])
def test_where_the_net_computes_on_the_cpu_workers_are_also_tried_with_threads_left_to_them_first(cnn, cores):
    """Worker processes and torch's threads share a CPU's cores: the pair is one option of the
    workers axis (coordinate ascent changes one axis at a time and misses it), tried first; every
    worker count is tried alone too, and workers=off never takes threads with it."""
    on_gpu = {a.name: a for a in space.axes(*cnn, cores=cores)}
    on_cpu = {a.name: a for a in space.axes(*cnn, cores=cores, compute_on_cpu=True)}
    assert all(len(o) == 1 for o in on_gpu["workers"].options)
    assert on_cpu["workers"].options[0] == ("workers=auto", "threads=half")
    assert set(on_gpu["workers"].options) < set(on_cpu["workers"].options)
    paired = [o for o in on_cpu["workers"].options if len(o) == 2]
    assert {o[1] for o in paired} == {"threads=half"}
    assert {o[0] for o in paired} == {o for (o,) in on_gpu["workers"].options} - {"workers=off"}
    assert {n: a for n, a in on_cpu.items() if n != "workers"} == {n: a for n, a in on_gpu.items() if n != "workers"}


def test_an_option_that_sets_another_axis_key_replaces_the_configurations_own_setting_of_it(cnn):
    by_name = {a.name: a for a in space.axes(*cnn, cores=2, compute_on_cpu=True)}
    best = ("compile=on", "threads=all", "workers=off")
    assert space.with_setting(best, by_name["workers"], ("workers=auto", "threads=half")) == (
        "compile=on",
        "threads=half",
        "workers=auto",
    )
    assert space.with_setting(best, by_name["workers"], ()) == ("compile=on", "threads=all")
    by_key = ("compile=on", "num_threads=1", "workers=off")  # num_threads=1 on the command line would win
    assert space.with_setting(by_key, by_name["workers"], ("workers=auto", "threads=half")) == (
        "compile=on",
        "threads=half",
        "workers=auto",
    )


@pytest.mark.slow  # composes every case (~2 s); `make test` (CI) runs it
def test_every_option_composes_with_the_workload(unet, cnn):
    """Each override string is one Hydra takes on top of the workload (a group option that does not
    exist, or a key the schema does not have, would fail every probe of it)."""
    for overrides, workload in ((UNET, unet), (CNN, cnn)):
        axes = space.axes(*workload, cores=16, batch_size=True, compute_on_cpu=True)
        for i in range(max(len(axis.options) for axis in axes)):  # the i-th option of every axis at once
            composed(*overrides, *(o for axis in axes if i < len(axis.options) for o in axis.options[i]))


def plain(*overrides):
    """The composed run config (interpolations unresolved: they need a running job)."""
    cfg, _ = composed(*overrides)
    return {key: value for key, value in OmegaConf.to_container(cfg).items() if key != "hydra"}


def test_a_preset_spelt_out_composes_the_same_run_as_the_preset(unet):
    _, choices = unet
    presets = space.presets(choices)
    assert presets["+opt=all"] == tuple(
        sorted(
            "cache=memory compile=on decode=reduced memory_format=channels_last pin=on precision=bf16 "
            "prefetch=on upsample=deconv workers=auto".split()
        )
    )
    assert "compile=off" in presets["+opt=all compile=off"]  # the command line wins over the preset
    for name, overrides in presets.items():
        assert plain(*overrides) == plain(*name.split())


def test_presets_leave_out_the_groups_a_workload_does_not_have(cnn):
    _, choices = cnn
    presets = space.presets(choices)
    assert not any(o.split("=")[0] in PIPELINE for overrides in presets.values() for o in overrides)
    composed(*CNN, *presets["+opt=all"])  # +opt=all itself does not compose with model=cnn


def test_an_unknown_preset_names_the_ones_there_are(unet):
    with pytest.raises(ValueError, match=r"\+opt=fastest: no preset .*opt/fastest.yaml; the presets are \[.*'all'"):
        space.presets(unet[1], names=["+opt=fastest"])
