"""The optional extras of pyproject.toml, and a test's way to need one: `needs_extra("slurm")`
skips the test, naming the extra and the install command, where a module of it is missing, so that
`pip install -e ".[dev]"` (any set of extras) keeps the fast tier green.

    needs_extra("onnx")  # in a test body (or at a module's top, before it imports the extra)

The modules are the ones the tests reach: a Hydra config of the `slurm` extra (hydra/launcher=slurm)
is only found when the plugin's package imports.
"""

from __future__ import annotations

import os
import sys

import pytest

EXTRAS = {
    "slurm": ("hydra_plugins.hydra_submitit_launcher", "submitit"),
    "onnx": ("onnx", "onnxscript", "onnxruntime"),
    "docs": ("mkdocs", "material", "pymdownx"),
}


def needs_extra(extra: str) -> None:
    """Skip the calling test unless every module of `extra` imports."""
    for module in EXTRAS[extra]:
        pytest.importorskip(
            module, reason=f"the `{extra}` extra is not installed (pip install -e '.[{extra}]'): no {module}"
        )


# `pytest -p tests.extras` with SEGPERF_TEST_WITHOUT_EXTRAS="slurm,onnx": those extras' modules made
# unimportable before anything imports them (None in sys.modules: `import` raises ImportError, and
# Hydra's plugin scan passes the plugin by), as on a machine that installed without them
WITHOUT = "SEGPERF_TEST_WITHOUT_EXTRAS"
for _extra in filter(None, os.environ.get(WITHOUT, "").split(",")):
    for _module in EXTRAS[_extra]:
        sys.modules[_module] = None  # type: ignore[assignment]
