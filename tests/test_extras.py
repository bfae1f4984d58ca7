"""Every test that needs an optional extra skips, naming it, where the extra is not installed:
`pip install -e ".[dev,docs]"` without `slurm` (or without `onnx`) keeps the fast tier green."""

from __future__ import annotations

import os
import subprocess
import sys
from xml.etree import ElementTree

import pytest

from tests.conftest import REPO
from tests.extras import WITHOUT

# each extra's users in the tests (grep tests/ for submitit, hydra/launcher=slurm, onnx, mkdocs, pymdownx)
NEEDS = {
    "slurm": [
        "tests/test_ddp_setup.py::test_the_scaling_out_pages_commands_compose_with_matching_ddp_and_slurm_settings",
        "tests/test_sweeper.py::test_train_sweeps_with_the_segperf_sweeper_by_default_and_the_launcher_stays_pluggable",
        "tests/test_tune_runner.py::test_the_command_to_continue_keeps_the_launcher_and_the_overrides",
        "tests/test_launcher.py",
    ],
    "onnx": ["tests/test_infer.py::test_onnxruntime_exports_the_model_and_agrees_with_torch"],
    "docs": [
        "tests/test_docs_site.py::test_the_readmes_links_into_docs_reach_a_file_and_its_heading",
        "tests/test_docs_site.py::test_a_link_to_a_missing_heading_is_found",
        "tests/test_docs_site.py::test_the_site_builds_with_strict_checks",
    ],
}


@pytest.mark.slow  # a pytest of its own (~15 s of imports on 2 cores)
def test_the_tests_of_a_missing_extra_skip_and_name_it(tmp_path):
    tests = [node for nodes in NEEDS.values() for node in nodes]
    env = {**os.environ, WITHOUT: ",".join(NEEDS)}
    report = tmp_path / "report.xml"
    command = [sys.executable, "-m", "pytest", "-p", "tests.extras", "-p", "no:xdist", "-p", "no:cacheprovider"]
    command += ["-q", f"--junitxml={report}", *tests]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # "tests/test_sweeper.py::test_..." (a module skipped whole: "tests/test_launcher.py") -> why it skipped
    outcome = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module, name = (
            (case.get("classname"), "::" + case.get("name")) if case.get("classname") else (case.get("name"), "")
        )
        skipped = case.find("skipped")
        outcome[module.replace(".", "/") + ".py" + name] = None if skipped is None else skipped.text
    for extra, nodes in NEEDS.items():
        for node in nodes:
            reasons = [reason for name, reason in outcome.items() if name.startswith(node)]
            assert reasons and all(f"the `{extra}` extra is not installed" in (r or "") for r in reasons), (
                node,
                outcome,
            )
