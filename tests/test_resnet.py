"""model=resnet18: the standard ResNet-18, written out (torchvision does not load with the CPU
torch build), in the classifiers' module with accuracy and, past five classes, top-5 accuracy."""

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from segperf.config import plain_config
from segperf.errors import SegperfError
from segperf.model.cnn import ClassificationModule
from segperf.model.resnet import ResNet18
from segperf.schema import problems_in
from tests.conftest import compose_config


def test_resnet18_has_torchvisions_11_689_512_parameters_at_1000_classes():
    assert sum(p.numel() for p in ResNet18(num_classes=1000).parameters()) == 11_689_512
    # the head alone changes with the classes: 512 x 4 weights + 4 biases instead of 512 x 1000 + 1000
    assert sum(p.numel() for p in ResNet18(num_classes=4).parameters()) == 11_689_512 - 513_000 + 2052


def test_its_blocks_are_2_2_2_2_basic_blocks_with_batch_norm_and_no_conv_bias():
    net = ResNet18(num_classes=10)
    assert [len(stage) for stage in (net.layer1, net.layer2, net.layer3, net.layer4)] == [2, 2, 2, 2]
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(convs) == len(norms) == 20 and all(c.bias is None for c in convs)
    assert (net.conv1.kernel_size, net.conv1.stride) == ((7, 7), (2, 2))


@pytest.mark.parametrize("size", [(64, 64), (96, 96), (224, 224), (64, 160)])
def test_it_gives_one_logit_per_class_for_any_input_of_at_least_64x64(size):
    net = ResNet18(num_classes=7).eval()
    assert net(torch.rand(2, 3, *size)).shape == (2, 7)


def test_too_small_an_input_is_refused_before_any_work_with_the_size_to_use():
    with pytest.raises(SegperfError, match=r"data.height=32, data.width=96: .* it takes 64x64 or more"):
        ResNet18().check_input_size(32, 96)  # a SegperfError: the command line prints it as one line
    text = ResNet18(num_classes=4).describe(96, 96)
    assert "stem: conv 7x7/2 -> batch norm -> ReLU -> max-pool 3x3/2: (64, 24, 24)" in text
    assert "stage 4: 2 basic blocks: (512, 3, 3)" in text and "4 classes; 11.18M parameters." in text


def test_the_config_sizes_the_head_from_the_folder_and_normalizes_rgb_on_the_device(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.jpg").write_bytes(b"")  # counted by name; the data check reads them later
    cfg = compose_config("data=imagefolder", "model=resnet18", f"data.root={tmp_path}")
    assert cfg.data.num_classes == cfg.model.net.num_classes == 3
    assert compose_config("data=imagefolder", "model=resnet18").model.net.num_classes == 4  # the built-in folder
    plain = OmegaConf.create(plain_config(cfg.model))  # what the run instantiates from (schema checked)
    module = instantiate(plain, net=instantiate(plain.net))
    image = torch.full((2, 8, 8, 3), 124, dtype=torch.uint8)  # ImageNet's mean red, 0.485 * 255
    x, y = module.on_after_batch_transfer((image, torch.tensor([0, 2])), 0)
    assert x.shape == (2, 3, 8, 8) and x.is_contiguous() and y.dtype == torch.int64
    assert abs(x[:, 0].mean().item()) < 0.02
    assert problems_in(cfg) == []


def test_top5_accuracy_is_measured_past_five_classes_only():
    torch.manual_seed(0)
    six, four = (ClassificationModule(ResNet18(num_classes=n), top5=True) for n in (6, 4))
    assert six.val_top5 is not None and four.val_top5 is None
    assert six.quality == four.quality and six.quality.metric == "val/accuracy"  # top-5 is beside it, not judged
    logits = torch.tensor([[0.0, 1, 2, 3, 4, 5], [5.0, 4, 3, 2, 1, 0]])
    six.val_top5.update(logits, torch.tensor([1, 5]))  # in the top 5 of the first, not of the second
    assert six.val_top5.compute().item() == pytest.approx(0.5)
    assert ClassificationModule(ResNet18(num_classes=10)).val_top5 is None  # off unless asked: the CNN's MNIST
    assert compose_config("data=imagefolder", "model=resnet18").model.top5 is True
