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
    with pytest.raises(ValueError, match=r"divisible by 16.*got 50x80.*data.height"):
        UNet()(torch.rand(1, 3, 50, 80))


def test_unknown_upsample_is_refused():
    with pytest.raises(ValueError, match="upconv.*deconv"):
        UNet(upsample="nearest")
