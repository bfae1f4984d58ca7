"""The architecture README's "Layout" and "Architecture" sections describe, held against the code:
what may import what, the size of the top level, files and the recipe, a Trainer from config."""

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
        ("data", ("segperf.model", "segperf.training", "segperf.report")),
        ("model", ("segperf.data", "segperf.training", "segperf.report")),
        # the tuner decides on probes and runs them as training jobs through Hydra's launcher: it
        # never builds a net, a loader or a trainer itself
        ("tune", ("torch", "lightning", "segperf.model", "segperf.data", "segperf.training", "segperf.inference")),
    ],
)
def test_each_package_imports_only_what_the_architecture_allows(package, forbidden):
    offending = {
        file: sorted(m for m in modules if m.startswith(forbidden) and m.split(".")[0] in ("segperf", *forbidden))
        for file, modules in package_imports(package).items()
    }
    assert {f: m for f, m in offending.items() if m} == {}


def test_the_top_of_the_package_holds_only_command_lines_and_shared_modules():
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= 7, top
    assert {"train.py", "infer.py", "config.py", "schema.py", "errors.py"} <= set(top)


def test_no_source_file_is_over_400_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


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
