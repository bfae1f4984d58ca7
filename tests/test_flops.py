"""FLOPs per image (counted on a meta-device twin of the net passed in), peaks by device name, MFU."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

from segperf.model.cnn import DigitCNN
from segperf.model.unet import UNet
from segperf.perf.flops import chip_name, flops_per_image, mfu, peak_flops, peak_flops_for_name, throughput_summary

UPCONV = UNet(upsample="upconv")
DECONV = UNet(upsample="deconv")
IMAGE = (3, 256, 384)  # channels, height, width


def test_training_flops_are_about_three_times_the_forward():
    train = flops_per_image(UPCONV, IMAGE, training=True)
    forward = flops_per_image(UPCONV, IMAGE, training=False)
    assert 2.5 < train / forward < 3.5


def test_deconv_has_fewer_flops_than_upconv():
    assert flops_per_image(DECONV, IMAGE) < flops_per_image(UPCONV, IMAGE)
    assert flops_per_image(DECONV, IMAGE, training=False) < flops_per_image(UPCONV, IMAGE, training=False)


def test_flops_scale_about_four_times_when_height_and_width_double():
    ratio = flops_per_image(UPCONV, IMAGE, training=False) / flops_per_image(UPCONV, (3, 128, 192), training=False)
    assert 3.8 < ratio < 4.2


def test_a_linear_layer_counts_two_flops_per_multiply_add():
    assert flops_per_image(nn.Sequential(nn.Flatten(), nn.Linear(12, 5)), (3, 2, 2), training=False) == 2 * 12 * 5


def test_any_net_is_counted_without_knowing_its_class():
    cnn = flops_per_image(DigitCNN(), (1, 28, 28), training=False)
    wider = flops_per_image(DigitCNN(channels=[64, 128]), (1, 28, 28), training=False)
    assert 0 < cnn < wider


def test_counting_runs_nothing_for_real_returns_a_plain_int_and_leaves_the_net_alone():
    net = UNet(stem_channels=8).to(memory_format=torch.channels_last).to(torch.bfloat16).eval()
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    seen: list[torch.device] = []  # the device of every tensor a layer was given while counting
    for module in net.modules():  # the meta twin is a deep copy: it keeps the hooks, and their list
        module.register_forward_pre_hook(lambda _, args: seen.extend(a.device for a in args if torch.is_tensor(a)))
    flops = flops_per_image(net, IMAGE)
    # counted on the meta device: shapes only, no memory allocated, no arithmetic done (hence cheap anywhere)
    assert seen and {device.type for device in seen} == {"meta"}
    assert type(flops) is int and flops > 0
    # the same count as for the fresh fp32 net: layout, dtype and mode do not change the FLOPs
    assert flops == flops_per_image(UNet(stem_channels=8), IMAGE)
    assert not net.training and all(p.grad is None for p in net.parameters())
    assert all(torch.equal(v, weights[k]) and v.device.type == "cpu" for k, v in net.state_dict().items())


def test_a_compiled_net_is_counted_without_compiling():
    compiled_graphs = []  # a torch.compile backend that records each graph it is asked to compile

    def recording_backend(graph, example_inputs):
        compiled_graphs.append(graph)
        return graph.forward

    net = UNet(upsample="deconv", stem_channels=8)
    expected = flops_per_image(net, (3, 64, 96))
    net.compile(backend=recording_backend)
    assert flops_per_image(net, (3, 64, 96)) == expected
    wrapped = torch.compile(UNet(upsample="deconv", stem_channels=8), backend=recording_backend)
    assert flops_per_image(wrapped, (3, 64, 96)) == expected
    assert compiled_graphs == []  # counted eagerly: compiling would take seconds and count the same FLOPs
    torch.compile(nn.Linear(4, 2), backend=recording_backend)(torch.ones(1, 4))
    assert len(compiled_graphs) == 1  # the backend does see a compile when one happens
    torch._dynamo.reset()


def test_sizes_the_unet_cannot_take_raise_its_error():
    with pytest.raises(ValueError, match="divisible by 16"):
        flops_per_image(UPCONV, (3, 250, 384))


@pytest.mark.parametrize(
    ("name", "chip"),
    [
        ("NVIDIA H200", "h200 sxm1"),
        ("NVIDIA H200 NVL", "h200 nvl1"),
        ("NVIDIA H100 80GB HBM3", "h100 sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA GeForce RTX 2060", "rtx 2060"),
        ("NVIDIA GeForce RTX 4080 SUPER", "rtx 4080 super"),
        ("Tesla T4", "t4"),
    ],
)
def test_driver_names_normalise_to_lightning_chip_names(name, chip):
    assert chip_name(name) == chip


def test_h200_peaks_are_dense_not_lightnings_with_sparsity_figures():
    # Lightning's H200 rows are NVIDIA's with-sparsity figures (2.0e15 bf16 on SXM); training is dense
    assert peak_flops_for_name("NVIDIA H200", "bf16-mixed", tf32=False) == pytest.approx(989.4e12)
    assert peak_flops_for_name("NVIDIA H200", "32-true", tf32=True) == pytest.approx(494.7e12)
    assert peak_flops_for_name("NVIDIA H200 NVL", "bf16-mixed", tf32=False) == pytest.approx(835.5e12)
    assert peak_flops_for_name("NVIDIA H100 NVL", "16-mixed", tf32=False) == pytest.approx(835.5e12)
    # the same GH100 compute as an H100 SXM; the non-tensor-core fp32 figure is kept
    assert peak_flops_for_name("NVIDIA H200", "bf16-mixed", tf32=False) == peak_flops_for_name(
        "NVIDIA H100 80GB HBM3", "bf16-mixed", tf32=False
    )
    assert peak_flops_for_name("NVIDIA H200", "32-true", tf32=False) == pytest.approx(6.7e13)


def test_fp32_reports_the_tf32_peak_only_when_tf32_is_on():
    fp32 = peak_flops_for_name("NVIDIA A100-SXM4-80GB", "32-true", tf32=False)
    tf32 = peak_flops_for_name("NVIDIA A100-SXM4-80GB", "32-true", tf32=True)
    assert fp32 == pytest.approx(19.5e12) and tf32 == pytest.approx(156e12)


def test_known_names_resolve_for_each_precision():
    assert peak_flops_for_name("NVIDIA H100 80GB HBM3", "bf16-mixed", tf32=False) == pytest.approx(989.4e12)
    assert peak_flops_for_name("NVIDIA A100-SXM4-80GB", "16-mixed", tf32=False) == pytest.approx(312e12)


def test_unknown_names_and_unlisted_chips_give_none_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert peak_flops_for_name("Some Unknown GPU", "bf16-mixed", tf32=False) is None
        assert peak_flops_for_name("NVIDIA GeForce RTX 2060", "16-mixed", tf32=False) is None  # not in the table
        assert peak_flops_for_name("NVIDIA RTX A4000", "32-true", tf32=False) is None  # not an A40
        assert peak_flops_for_name("Tesla T4", "bf16-mixed", tf32=False) is None  # no bf16 on a T4


def test_cpu_has_no_known_peak():
    assert peak_flops("cpu", "32-true") is None
    assert peak_flops(torch.device("cpu"), "bf16-mixed") is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((10.0, 3e9, 1e12), 0.03),
        ((None, 3e9, 1e12), None),
        ((10.0, None, 1e12), None),
        ((10.0, 3e9, None), None),
        ((0.0, 3e9, 1e12), None),
        ((10.0, 3e9, 0.0), None),
    ],
)
def test_mfu_is_achieved_over_peak_and_none_when_anything_is_missing(args, expected):
    assert mfu(*args) == (expected if expected is None else pytest.approx(expected))


def test_throughput_summary_on_cpu_has_flops_but_no_spec_sheet_mfu():
    s = throughput_summary(2.0, 6.0, UPCONV, IMAGE, "cpu", "32-true")
    assert s["train_flops_per_image"] == flops_per_image(UPCONV, IMAGE, training=True)
    assert s["val_flops_per_image"] == flops_per_image(UPCONV, IMAGE, training=False)
    assert s["achieved_train_flops_per_s"] == pytest.approx(2.0 * s["train_flops_per_image"])
    assert s["peak_flops_per_s"] is None and s["mfu"] is None
    assert s["measured_peak"] is None and s["measured_mfu"] is None  # no probe asked for
    json.dumps(s)


def test_throughput_summary_has_mfu_against_a_measured_peak_on_the_cpu():
    peak = {"flops_per_s": 1e11, "method": "torch.matmul ...", "cached": True, "source": "measured"}
    s = throughput_summary(2.0, None, DECONV, (3, 64, 96), "cpu", "32-true", measured_peak=peak)
    assert s["measured_peak"] == peak
    assert s["measured_mfu"] == pytest.approx(2.0 * s["train_flops_per_image"] / 1e11)
    assert s["mfu"] is None  # still no spec sheet for a CPU


def test_throughput_summary_without_a_train_rate_has_no_achieved_flops():
    s = throughput_summary(None, None, DECONV, (3, 64, 96), "cpu", "32-true")
    assert s["achieved_train_flops_per_s"] is None and s["train_images_per_s"] is None


def fake_cuda(monkeypatch, name: str) -> None:
    """Make `peak_flops` see a CUDA device called `name` (Ampere or later), with no GPU present."""
    import lightning.fabric.accelerators.cuda as lightning_cuda

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(lightning_cuda, "_is_ampere_or_later", lambda device=None: True)


def test_peak_flops_on_a_cuda_h200_uses_the_normalised_name(monkeypatch):
    fake_cuda(monkeypatch, "NVIDIA H200")
    assert peak_flops("cuda:0", "bf16-mixed") == pytest.approx(989.4e12)
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert peak_flops("cuda", "32-true") == peak_flops_for_name("NVIDIA H200", "32-true", tf32=True)


def test_peak_flops_for_an_unknown_cuda_name_falls_back_quietly_to_none(monkeypatch):
    fake_cuda(monkeypatch, "Some Unknown GPU")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert peak_flops("cuda", "bf16-mixed") is None
