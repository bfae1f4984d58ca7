"""The sweep-analysis notebook runs top to bottom against a sweep (slow: starts a kernel)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import REPO

pytestmark = pytest.mark.slow
NOTEBOOK = REPO / "notebooks" / "sweep_analysis.ipynb"


def test_notebook_is_stored_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None


def test_notebook_executes_against_a_sweep_and_draws_its_charts(monkeypatch):
    sweep = Path(__file__).parent / "fixtures" / "sweep_repeats"
    monkeypatch.setenv("SEGPERF_SWEEP", str(sweep))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "9 runs, 0 failed, 3 configurations" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3  # throughput, phases, quality
