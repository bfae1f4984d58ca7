"""What docs/architecture.md ("Layout", "Where data flows, what may import what") describes, held
against the code: which package may import which (the data sources apart from each other, the shared
data modules apart from every source), the recipe on one screen, a Trainer from config."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

SRC = REPO / "src" / "segperf"
CALLBACKS = ("segperf.callbacks",)


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function (lazy imports count too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def package_imports(package: str) -> dict[str, set[str]]:
    return {str(p.relative_to(SRC)): imported_modules(p) for p in (SRC / package).rglob("*.py")}


# the one exception: the tuner's check of which precisions this CPU emulates times a small conv
# block under autocast (~1 s) and reads the run's precision notice, before any probe is launched
MEASURES_THE_MACHINE = {"tune/native.py"}


@pytest.mark.parametrize(
    "package,forbidden",
    [
        # measurement maths: no callback in it (the callbacks call perf, never the other way round)
        (
            "perf",
            (
                "segperf.model",
                "segperf.data",
                "segperf.training",
                "segperf.report",
                "segperf.inference",
                "segperf.callbacks",
            ),
        ),
        # the callbacks work in any user's Trainer: nothing of segperf's own workloads or runs
        ("callbacks", ("segperf.model", "segperf.data", "segperf.training", "segperf.report", "segperf.inference")),
        ("report", ("segperf.model", "segperf.data", "segperf.training", "segperf.inference", "torch", "lightning")),
        ("bench", ("segperf.report", "segperf.training", "segperf.model")),
        # the data sources know nothing of the commands that use them (training, inference, the bench)
        ("data", ("segperf.model", "segperf.training", "segperf.report", "segperf.bench", "segperf.inference")),
        ("model", ("segperf.data", "segperf.training", "segperf.report")),
        # the tuner decides on probes and runs them as training jobs through Hydra's launcher: it
        # never builds a net, a loader or a trainer itself
        ("tune", ("torch", "lightning", "segperf.model", "segperf.data", "segperf.training", "segperf.inference")),
        # the CI gate reads finished runs, as the report does, and decides with the report's rule
        ("compare", ("torch", "lightning", "segperf.model", "segperf.data", "segperf.training", "segperf.inference")),
    ],
)
def test_each_package_imports_only_what_the_architecture_allows(package, forbidden):
    offending = {
        file: sorted(m for m in modules if m.startswith(forbidden) and m.split(".")[0] in ("segperf", *forbidden))
        for file, modules in package_imports(package).items()
        if file not in MEASURES_THE_MACHINE
    }
    assert {f: m for f, m in offending.items() if m} == {}


DATA = SRC / "data"
WORKLOADS = ("carvana", "imagefolder", "mnist")  # data/<workload>/: one folder per data source
# the modules at data/ that only run a moved generator under its first command name (runpy, no import)
COMMAND_ALIASES = {"synthetic.py", "digits.py"}


def segperf_imports(path: Path) -> set[str]:
    return {m for m in imported_modules(path) if m.startswith("segperf.")}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_no_data_source_imports_another(workload):
    others = tuple(f"segperf.data.{other}" for other in WORKLOADS if other != workload)
    offending = {
        str(p.relative_to(DATA)): sorted(m for m in segperf_imports(p) if m.startswith(others))
        for p in (DATA / workload).rglob("*.py")
    }
    assert {f: m for f, m in offending.items() if m} == {}


def test_the_shared_data_modules_import_no_data_source():
    sources = tuple(f"segperf.data.{workload}" for workload in WORKLOADS)
    shared = [p for p in DATA.glob("*.py") if p.name not in COMMAND_ALIASES]
    assert {"base.py", "cache.py", "cold.py", "prefetch.py", "resumable.py", "folders.py"} <= {p.name for p in shared}
    offending = {p.name: sorted(m for m in segperf_imports(p) if m.startswith(sources)) for p in shared}
    assert {f: m for f, m in offending.items() if m} == {}
    # the command aliases run the moved generators, they import nothing of them
    assert all(not segperf_imports(DATA / name) for name in COMMAND_ALIASES)


def test_the_decoded_sample_cache_imports_no_data_source():
    """cache.py serves any sample type: Carvana's masks and an image folder's labels alike."""
    assert not any(
        m.startswith(tuple(f"segperf.data.{w}" for w in WORKLOADS)) for m in segperf_imports(DATA / "cache.py")
    )


def test_the_loader_bench_builds_no_loader_of_its_own():
    """It times the DataModule training builds (from training's data config): no DataLoader, no
    dataset or layout of a data source is made in segperf.bench."""
    sources = tuple(f"segperf.data.{workload}" for workload in WORKLOADS)
    for file, modules in package_imports("bench").items():
        assert not any(m.startswith(sources) or m.startswith("torch.utils.data") for m in modules), file


def test_each_data_source_has_a_folder_and_a_datamodule():
    assert sorted(p.name for p in DATA.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(WORKLOADS)
    assert all((DATA / workload / "datamodule.py").is_file() for workload in WORKLOADS)


def test_train_reads_as_a_recipe_on_one_screen():
    tree = ast.parse((SRC / "training" / "run.py").read_text())
    train = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert train.end_lineno - train.lineno + 1 <= 60
    # no branch per model: the nets answer the same interface (segperf.model.Net)
    body = ast.unparse(train)
    assert not any(name in body for name in ("isinstance(net", "isinstance(module", "UNet", "DigitCNN"))


def test_the_trainer_and_the_callbacks_come_from_the_config():
    trainer = yaml.safe_load((REPO / "conf" / "trainer" / "default.yaml").read_text())
    assert trainer["_target_"] == "lightning.pytorch.Trainer"
    callbacks = yaml.safe_load((REPO / "conf" / "callbacks" / "default.yaml").read_text())
    assert callbacks and all("_target_" in entry for entry in callbacks.values())
    for profile in ("ops", "counters"):
        added = yaml.safe_load((REPO / "conf" / "profile" / f"{profile}.yaml").read_text())["callbacks"]
        assert all("_target_" in entry for entry in added.values())
