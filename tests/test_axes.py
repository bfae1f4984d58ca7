"""The one table of the optimization axes (segperf.axes), held against the configs it describes
and the README's axes table that shows it to people."""

from __future__ import annotations

import re

import pytest
from hydra import compose, initialize_config_dir

from segperf import axes
from segperf.axes import training_axis_keys
from segperf.config import CONFIG_DIR
from tests.conftest import REPO

# data=<workload> with its own model, as a user runs it
WORKLOADS = {"carvana": [], "imagefolder": ["data=imagefolder", "model=resnet18"], "mnist": ["data=mnist", "model=cnn"]}
# groups of the composed configs that are not optimization axes: what runs, its size, its tooling
NOT_AXES = {"data", "model", "trainer", "callbacks", "size", "size/unet@_global_", "size_for@_global_", "profile"}


def choices(config_name: str, *overrides: str) -> dict[str, str]:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=list(overrides), return_hydra_config=True)
    return {group: option for group, option in cfg.hydra.runtime.choices.items() if not group.startswith("hydra/")}


@pytest.fixture(scope="module")
def composed():
    return {name: choices("train", *overrides) for name, overrides in WORKLOADS.items()}


def test_each_workload_composes_exactly_the_axes_the_table_gives_it_at_their_baselines(composed):
    for workload, chosen in composed.items():
        expected = {a.group: a.baseline for a in axes.training_axes() if workload in a.workloads}
        found = {group: option for group, option in chosen.items() if group not in NOT_AXES}
        if workload == "imagefolder":  # a classifier's usual training transform: its own default
            expected["augment"] = "basic"
        assert found == expected, workload


def test_the_inference_benchmark_has_the_tables_inference_axes_at_their_baselines():
    chosen = choices("infer")
    for axis in axes.inference_axes():
        assert chosen.get(axis.group) == axis.baseline, axis.group


def test_what_an_option_sets_is_read_from_its_file():
    assert axes.option_settings("workers", "off") == {"data.num_workers": 0}
    assert axes.option_settings("threads", "half") == {"num_threads": "${half_cores_per_rank:${trainer.devices}}"}
    assert axes.option_settings("upsample", "deconv") == {"model.net.upsample": "deconv"}
    # not a global package: the keys sit under the group's name, as Hydra places them
    assert axes.option_settings("runtime", "torch")["runtime.name"] == "torch"
    with pytest.raises(ValueError, match=r"workers=many: no option file .*workers/many.yaml; the options are"):
        axes.option_settings("workers", "many")


def test_every_option_of_an_axis_sets_the_key_that_records_it():
    for axis in axes.AXES:
        for option in axis.options:
            assert axis.key in axes.option_settings(axis.group, option), f"{axis.group}={option}"


def test_the_run_record_names_each_training_axis_by_the_key_its_options_set():
    for axis in axes.training_axes():
        assert training_axis_keys()[axis.group] in axis.keys
    assert axes.search_order()[:3] == ("decode", "cache", "workers")  # the data side first
    assert "augment" not in axes.search_order()  # a recipe choice, never traded for speed


def readme_axes_table() -> dict[str, set[str]]:
    """The README's section "The optimization axes": its table's rows as group -> options (the
    backquoted names in the first two cells), whatever else the rows say."""
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## The optimization axes\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert section, 'README.md has no section "## The optimization axes"'
    rows = {}
    for line in section[1].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and (group := re.fullmatch(r"`(\w+)`", cells[0])):
            rows[group[1]] = set(re.findall(r"`([\w-]+)`", cells[1]))
    return rows


def test_the_readmes_axes_table_lists_every_axis_with_its_options_and_no_other():
    table = readme_axes_table()
    assert {axis.group: set(axis.options) for axis in axes.training_axes()} == table
