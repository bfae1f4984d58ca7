import pytest
import torch

from segperf.model.unet import UNet, describe, level_shapes

SEED_LEVELS = [
    ((32, 256, 384), (32, 256, 384)),
    ((64, 128, 192), (64, 128, 192)),
    ((128, 64, 96), (128, 64, 96)),
    ((256, 32, 48), (256, 32, 48)),
    ((512, 16, 24), None),
]


@pytest.mark.parametrize("upsample", ["upconv", "deconv"])
def test_level_shapes_match_the_seed_study_table(upsample):
    assert level_shapes(UNet(upsample=upsample), 256, 384) == SEED_LEVELS


def test_printed_summary_shows_the_seed_levels():
    text = describe(UNet(), 256, 384)
    assert "level 0: encoder (  32,  256,  384), decoder (  32,  256,  384)" in text
    assert "level 4: encoder ( 512,   16,   24), decoder none" in text


def test_upsample_options_build_different_operations_and_deconv_is_smaller():
    deconv, upconv = UNet(upsample="deconv"), UNet(upsample="upconv")
    assert any(isinstance(m, torch.nn.ConvTranspose2d) for m in deconv.modules())
    assert not any(isinstance(m, torch.nn.ConvTranspose2d) for m in upconv.modules())
    assert any(isinstance(m, torch.nn.Upsample) for m in upconv.modules())
    n = lambda net: sum(p.numel() for p in net.parameters())  # noqa: E731
    assert 7.7e6 < n(deconv) < 7.9e6 < n(upconv)


@pytest.mark.parametrize("upsample", ["upconv", "deconv"])
def test_forward_gives_per_pixel_logits_for_any_size_divisible_by_16(upsample):
    net = UNet(upsample=upsample)
    out = net(torch.rand(2, 3, 48, 80))
    assert out.shape == (2, 2, 48, 80)


def test_input_not_divisible_by_16_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"data.height=50: .*multiple of 16.*got 50x80"):
        UNet()(torch.rand(1, 3, 50, 80))


def test_unknown_upsample_is_refused():
    with pytest.raises(ValueError, match="upconv.*deconv"):
        UNet(upsample="nearest")


def test_the_plain_net_is_the_seeds_without_any_norm_layer_and_with_conv_biases():
    net = UNet()
    assert net.config["norm"] == "none"
    assert not any(isinstance(m, (torch.nn.BatchNorm2d, torch.nn.GroupNorm)) for m in net.modules())
    assert all(m.bias is not None for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    assert not any("norm" in key for key in net.state_dict())  # a seed-era checkpoint's keys, exactly


@pytest.mark.parametrize("norm, layer", [("batch", torch.nn.BatchNorm2d), ("group", torch.nn.GroupNorm)])
def test_a_norm_follows_every_block_conv_and_that_conv_has_no_bias(norm, layer):
    net = UNet(norm=norm)
    blocks = [m for m in net.modules() if m.__class__.__name__ == "ResidualBlock"]
    assert len(blocks) == 5 + 4  # encoder levels + decoder levels
    for block in blocks:
        assert isinstance(block.norm1, layer) and isinstance(block.norm2, layer)
        assert block.conv1.bias is None and block.conv2.bias is None
    # convs without a norm after them (stem, upsampling, head) keep theirs
    assert net.stem.bias is not None and net.head.bias is not None
    assert net(torch.rand(2, 3, 32, 48)).shape == (2, 2, 32, 48)
    assert "norm=" + norm in describe(net, 256, 384)


@pytest.mark.parametrize("norm", ["none", "batch", "group"])
def test_every_norm_runs_the_inference_probe_twin_of_four_channels_on_its_smallest_input(norm):
    net = UNet(norm=norm, stem_channels=4, level_channels=[4, 4, 4, 4, 4]).eval()  # 1x1 at the bottom level
    with torch.inference_mode():
        assert net(torch.rand(1, 3, 16, 16)).shape == (1, 2, 16, 16)


def test_unknown_norm_is_refused_naming_the_options():
    with pytest.raises(ValueError, match="none.*batch.*group"):
        UNet(norm="layer")


def test_the_lightning_module_is_built_without_a_library_warning_on_the_console():
    # torchmetrics warns about DiceScore's average whenever "micro" is given: segperf gives it on purpose
    import warnings

    from segperf.model.module import SegmentationModule

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SegmentationModule(UNet(stem_channels=8, level_channels=[8, 16, 32, 64, 128]))
