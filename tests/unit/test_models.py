"""Every registered model builds by name, trains a step on the CPU, and rejects bad options and sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from torch import nn
from torch.nn import functional as F

from hpcshuffle import models

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"
NUM_CLASSES = 7  # not a default anywhere, so the head must have been sized from the argument
BATCH = 2

# name -> (height, width, options) for one forward+backward pass: 32×32 for CIFAR-style models,
# 64×64 for ImageNet ones, Inception-v4's paper stem needs >= 75×75, DeepCAM needs multiples of 16
TRAIN_STEP_CASES = {
    "small_cnn": (32, 32, {}),
    "resnet50": (64, 64, {}),
    "densenet161": (64, 64, {}),
    "wrn28_10": (32, 32, {}),
    "wrn16_2": (32, 32, {}),
    "inceptionv4": (80, 80, {}),
    "inceptionv4_small": (32, 32, {}),
    "deepcam_small": (96, 144, {}),
}
# the full DeepCAM trains too slowly on 2 CPU cores: forward only (test_deepcam_full_size_output)
FORWARD_ONLY = {"deepcam"}
NO_CONVOLUTION = {"emulated"}  # DLIO's emulated accelerator: tests/unit/test_dlio_peer.py


@pytest.fixture(autouse=True, scope="module")
def two_threads():
    """Time the file as on a 2-core node, and give the rest of the session its thread count back."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def first_conv(model: nn.Module) -> nn.Conv2d:
    return next(module for module in model.modules() if isinstance(module, nn.Conv2d))


def parameter_count(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def test_every_registered_model_is_covered() -> None:
    assert set(TRAIN_STEP_CASES) | FORWARD_ONLY | NO_CONVOLUTION == set(models.MODELS)


@pytest.mark.parametrize("name", sorted(TRAIN_STEP_CASES))
def test_train_step_reaches_the_first_layer(name: str) -> None:
    height, width, options = TRAIN_STEP_CASES[name]
    torch.manual_seed(0)
    model = models.build(name, num_classes=NUM_CLASSES, in_channels=1, **options)
    assert first_conv(model).in_channels == 1
    images = torch.randn(BATCH, 1, height, width)

    logits = model(images)

    segmentation = name.startswith("deepcam")
    expected = (BATCH, NUM_CLASSES, height, width) if segmentation else (BATCH, NUM_CLASSES)
    assert logits.shape == expected
    labels = torch.randint(NUM_CLASSES, (BATCH, height, width) if segmentation else (BATCH,))
    # a real loss: the mean of the logits would give BatchNorm a constant gradient, which it zeroes
    F.cross_entropy(logits, labels).backward()
    grad = first_conv(model).weight.grad
    assert grad is not None and grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["resnet50", "densenet161"])
def test_small_input_keeps_32x32_images_alive(name: str) -> None:
    model = models.build(name, num_classes=NUM_CLASSES, in_channels=1, small_input=True).eval()
    stem = first_conv(model)
    assert (stem.in_channels, stem.kernel_size, stem.stride) == (1, (3, 3), (1, 1))
    assert not any(isinstance(module, nn.MaxPool2d) for module in model.modules())
    with torch.no_grad():
        assert model(torch.randn(BATCH, 1, 32, 32)).shape == (BATCH, NUM_CLASSES)


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_default_in_channels(name: str) -> None:
    expected = 16 if name.startswith("deepcam") else 3
    assert models.default_in_channels(name) == expected
    if name in ("small_cnn", "wrn16_2", "inceptionv4_small", "deepcam_small"):  # the cheap ones to build
        assert first_conv(models.build(name, num_classes=NUM_CLASSES)).in_channels == expected


@pytest.fixture(scope="module")
def deepcam() -> nn.Module:
    torch.manual_seed(0)
    return models.build("deepcam", num_classes=3, in_channels=16).eval()


def test_deepcam_full_size_output(deepcam: nn.Module) -> None:
    # not the reference's 768×1152: any sides divisible by 16
    with torch.no_grad():
        logits = deepcam(torch.randn(2, 16, 96, 144))
    assert logits.shape == (2, 3, 96, 144)
    assert torch.isfinite(logits).all()


def test_deepcam_rejects_sides_not_divisible_by_16(deepcam: nn.Module) -> None:
    with pytest.raises(ValueError, match=r"divisible by 16.*100×144"):
        deepcam(torch.randn(1, 16, 100, 144))


@pytest.mark.parametrize("height, width", [(16, 16), (32, 48), (48, 32)])
def test_deepcam_other_sizes(height: int, width: int) -> None:
    model = models.build("deepcam_small", num_classes=3).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 16, height, width)).shape == (1, 3, height, width)


def test_deepcam_channels_last_gives_the_same_logits() -> None:
    torch.manual_seed(0)
    model = models.build("deepcam_small", num_classes=3).eval()
    images = torch.randn(2, 16, 32, 48)
    with torch.no_grad():
        expected = model(images)
        model = model.to(memory_format=torch.channels_last)
        actual = model(images.to(memory_format=torch.channels_last))
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


def test_inception_paper_stem_names_its_minimum_size() -> None:
    model = models.build("inceptionv4_small", num_classes=NUM_CLASSES, small_input=False).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 75, 75)).shape == (1, NUM_CLASSES)
        with pytest.raises(ValueError, match=r"75×75.*small_input"):
            model(torch.randn(1, 3, 74, 74))


# (name, num_classes, expected parameters, relative tolerance)
PARAMETER_COUNTS = [
    ("resnet50", 1000, 25.6e6, 0.02),  # He et al. 2016; torchvision: 25,557,032
    ("densenet161", 1000, 28.7e6, 0.02),  # Huang et al. 2017; torchvision: 28,681,000
    ("wrn28_10", 100, 36.5e6, 0.02),  # Zagoruyko & Komodakis 2016, Table 1 (CIFAR-100)
    ("inceptionv4", 1000, 42.7e6, 0.03),  # the usual count of the paper's model (e.g. timm: 42,679,816)
    # counted layer by layer from the MLPerf HPC reference DeepLabv3_plus(n_input=16, n_classes=3, os=16)
    ("deepcam", 3, 56_454_720, 0.0),
]


@pytest.mark.parametrize("name, num_classes, expected, tolerance", PARAMETER_COUNTS)
def test_parameter_counts_match_the_literature(name: str, num_classes: int, expected: float, tolerance: float) -> None:
    count = parameter_count(models.build(name, num_classes=num_classes))
    assert abs(count - expected) <= tolerance * expected, f"{name}: {count:,} parameters, expected ≈ {expected:,.0f}"


def test_unknown_model_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'resnet51'.*resnet50"):
        models.build("resnet51", num_classes=10)


@pytest.mark.parametrize(
    "name, options, accepted",
    [
        ("resnet50", {"widht": 2}, "small_input"),
        ("deepcam_small", {"output_stride": 8}, "middle_blocks"),
        ("small_cnn", {"dropout": 0.1}, "width"),
    ],
)
def test_unknown_option_names_it_and_the_accepted_ones(name: str, options: dict, accepted: str) -> None:
    (option,) = options
    with pytest.raises(ValueError, match=rf"{option}.*{accepted}"):
        models.build(name, num_classes=10, **options)


@pytest.mark.parametrize(
    "name, options",
    [
        ("wrn16_2", {"depth": 27}),
        ("wrn16_2", {"width": 0}),
        ("wrn16_2", {"dropout": 1.0}),
        ("inceptionv4_small", {"width": -0.5}),
        ("inceptionv4_small", {"blocks_b": 0}),
        ("deepcam_small", {"middle_blocks": 2.5}),
        ("resnet50", {"small_input": "yes"}),
        ("small_cnn", {"width": True}),
    ],
)
def test_bad_option_value_names_the_option(name: str, options: dict) -> None:
    (option,) = options
    with pytest.raises(ValueError, match=option):
        models.build(name, num_classes=10, **options)


@pytest.mark.parametrize("argument", ["num_classes", "in_channels"])
def test_bad_shape_argument_names_it(argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        models.build("small_cnn", **{"num_classes": 10, argument: 0})


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_conf_file_lists_the_options_and_their_defaults(name: str) -> None:
    conf = yaml.safe_load((CONF_DIR / f"{name}.yaml").read_text())
    assert conf.pop("name") == name
    assert conf.pop("norm") == "worker"  # the runner's, not the model's: where BatchNorm takes its statistics
    assert conf == models.default_options(name)


def test_every_conf_file_names_a_registered_model() -> None:
    assert {path.stem for path in CONF_DIR.glob("*.yaml")} == set(models.MODELS)
