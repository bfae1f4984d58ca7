"""Missing hardware or a failing library turns a feature off, says so once and records it; an
error inside a DataLoader worker reaches the user as the file that failed, not a traceback."""

import json
import logging

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from segperf.data.carvana.dataset import CarvanaDataset
from segperf.errors import explain, is_worker_error
from segperf.model import SegmentationModule, UNet
from segperf.training.run import train
from tests.conftest import raises_from_loader


def failing_backend(graph_module, example_inputs):
    raise RuntimeError("no working C++ compiler (test stand-in)")


def tiny_module(compile: bool) -> SegmentationModule:
    return SegmentationModule(UNet(stem_channels=4, level_channels=[4, 8]), compile=compile)


def test_a_compiler_that_fails_at_the_first_call_falls_back_to_eager_once(capsys):
    module = tiny_module(compile=True)
    module.net.compile(backend=failing_backend)
    x = torch.rand(2, 3, 16, 16)
    out = module(x)
    assert out.shape == (2, 2, 16, 16)
    assert "no working C++ compiler" in module.compile_fallback
    assert torch.equal(module(x), tiny_module_like(module)(x))  # eager from now on, same weights
    printed = capsys.readouterr().out
    assert printed.count("torch.compile failed") == 1


def tiny_module_like(module: SegmentationModule) -> SegmentationModule:
    twin = tiny_module(compile=False)
    twin.load_state_dict(module.state_dict())
    return twin


def test_an_error_in_an_uncompiled_model_is_not_swallowed():
    module = tiny_module(compile=False)
    with pytest.raises(ValueError, match="divisible by 2"):
        module(torch.rand(1, 3, 15, 16))


@pytest.mark.slow  # a whole run; test_a_compiler_that_fails_at_the_first_call_falls_back_to_eager_once stays fast
def test_a_run_whose_compiler_fails_completes_and_records_the_adjustment(tmp_path, tiny_cfg, monkeypatch):
    real_compile = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: real_compile(self, backend=failing_backend))
    results = train(tiny_cfg("compile=on", "train_images=4"), tmp_path)
    assert results["status"] == "completed"
    change = results["adjusted"]["model.compile"]
    assert (change["requested"], change["used"]) == (True, False)
    assert "no working C++ compiler" in change["reason"]
    assert any(note.startswith("model.compile=True adjusted to False") for note in results["notices"])


def test_no_gpu_is_noted_once_and_recorded(tmp_path, tiny_cfg, caplog):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with caplog.at_level(logging.INFO, logger="segperf"):
        results = train(tiny_cfg("train_images=4"), tmp_path)
    note = "GPU: none visible to torch; GPU utilization and memory not sampled"
    assert note in results["resources"]["notes"]
    said = [r.getMessage() for r in caplog.records if r.name == "segperf"]  # through logging, as Lightning's
    assert said.count(f"segperf: note: {note}") == 1


# -- errors inside DataLoader workers ------------------------------------------------------------


class BrokenFile(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        raise OSError(f"could not decode image /data/train/car_{index:02d}.jpg: broken data stream")


def test_a_worker_error_is_explained_by_the_file_not_the_traceback():
    with raises_from_loader(OSError) as caught:
        next(iter(DataLoader(BrokenFile(), num_workers=1)))
    assert is_worker_error(caught.value) and "Traceback" in str(caught.value)
    assert explain(caught.value) == (
        "could not decode image /data/train/car_00.jpg: broken data stream (in DataLoader worker 0)"
    )


@pytest.mark.slow
def test_a_run_whose_worker_fails_records_the_file_without_a_traceback(tmp_path, tiny_cfg, monkeypatch):
    def broken(self, index):
        raise OSError(f"could not decode image {self.samples[index].image}: broken data stream")

    monkeypatch.setattr(CarvanaDataset, "__getitem__", broken)  # workers are forked: they see it too
    with pytest.raises(OSError):
        train(tiny_cfg("data.num_workers=1", "train_images=4"), tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed"
    assert results["error"].startswith("could not decode image ")
    assert results["error"].endswith(".jpg: broken data stream (in DataLoader worker 0)")
    assert "Traceback" not in results["error"]
