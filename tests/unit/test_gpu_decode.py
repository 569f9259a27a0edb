"""loader.decode=gpu on the CPU device: the same draws as the CPU path, encoded batches that decode
to what the workers would have made, and undecodable JPEGs named or skipped.

Everything but the CUDA side stream runs here; benchmarks/gpu_check.sh measures it on a GPU.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional

from hpcshuffle.formats.catalog import DatasetError
from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.formats.imagefolder import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageFolderCodec,
    make_codec,
    scan,
)
from hpcshuffle.formats.jpeg_batch import RawImage
from hpcshuffle.formats.synthetic import class_image, jpeg_bytes, synth_imagefolder
from hpcshuffle.storage.collate import EncodedBatch
from hpcshuffle.storage.device_decode import DeviceDecoder
from hpcshuffle.storage.loader import (
    EpochOrder,
    Samples,
    augmentation_seed,
    make_loader,
)

CPU = torch.device("cpu")
SAMPLES, BATCH = 24, 8


def jpegs_of_several_sizes(count: int = 8) -> list[bytes]:
    """Noisy class images cut to differing heights and widths, as JPEGs."""
    rng = np.random.default_rng(7)
    return [jpeg_bytes(class_image(i % 4, 4, 48, rng)[: 30 + 2 * i, : 48 - i]) for i in range(count)]


def torchvision_pipeline(augment: str, size: int | None) -> v2.Compose:
    """The training transform the ImageFolder codec was built from before it drew `Crop`s itself."""
    resize = [] if size is None else [v2.Resize((size, size), antialias=True)]
    if augment == "standard":
        train = [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()]
    else:
        train = [*resize, v2.RandomHorizontalFlip()] if augment == "flip" else resize
    return v2.Compose([*train, v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


@pytest.mark.parametrize(("augment", "size"), [("standard", 24), ("flip", None), ("flip", 20), ("none", 20)])
def test_the_cpu_path_draws_and_augments_as_torchvision_does(augment, size):
    """Drawing the crop and flip ourselves changed no tensor and no later draw of a seeded run."""
    codec, pipeline = ImageFolderCodec(4, DatasetOptions(augment, size)), torchvision_pipeline(augment, size)
    data = jpegs_of_several_sizes(1)[0] if size else jpeg_bytes(class_image(1, 4, 16, np.random.default_rng(0)))
    for seed in range(12):
        torch.manual_seed(seed)
        ours, after_ours = codec.decode(data, 0, train=True)[0], torch.rand(1)
        torch.manual_seed(seed)
        theirs, after_theirs = pipeline(Image.open(io.BytesIO(data)).convert("RGB")), torch.rand(1)
        assert torch.equal(ours, theirs) and torch.equal(after_ours, after_theirs), f"seed {seed}"


def test_the_batched_path_crops_and_flips_as_the_cpu_path():
    codec = ImageFolderCodec(4, DatasetOptions("standard", 24))
    jpegs, cpu, raw, crops = jpegs_of_several_sizes(), [], [], []
    for seed, data in enumerate(jpegs):
        torch.manual_seed(seed)
        cpu.append(codec.decode(data, 0, train=True)[0])
        torch.manual_seed(seed)
        encoded, _ = codec.encoded(data, 0)
        torch.manual_seed(seed)
        image = Image.open(io.BytesIO(data)).convert("RGB")
        assert encoded.crop == codec.draw_crop(image.height, image.width)
        # the CPU path cropped exactly that box, and flipped exactly then
        box = functional.resized_crop(image, *encoded.crop[:4], [24, 24], antialias=True)
        box = functional.horizontal_flip(box) if encoded.crop.flip else box
        assert torch.equal(cpu[-1], codec.to_input(box))
        raw.append(encoded.data)
        crops.append(encoded.crop)
    assert 0 < sum(crop.flip for crop in crops) < len(crops)
    assert len({crop[:4] for crop in crops}) == len(crops)
    batched = codec.decode_batch(raw, torch.tensor(crops), CPU)
    assert batched.shape == (len(jpegs), 3, 24, 24)
    # resampling differs (roi_align's bin average against PIL's antialiased bilinear): close, not equal
    error = ((batched - torch.stack(cpu)) * torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)).abs()
    assert error.mean() < 0.03, error.mean()
    wrong_flips = codec.decode_batch(raw, torch.tensor([crop._replace(flip=not crop.flip) for crop in crops]), CPU)
    assert ((wrong_flips - torch.stack(cpu)) * 0.226).abs().mean() > 3 * error.mean()


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return scan(synth_imagefolder(tmp_path_factory.mktemp("src"), SAMPLES, 2, image_size=12, progress=False), "train")


def loader_batches(catalog, raw_fraction: float, workers: int = 0, **samples_options):
    order = EpochOrder()
    order.set_order(np.random.default_rng(1).permutation(SAMPLES), epoch=2)
    codec = make_codec(catalog.root, catalog, DatasetOptions("flip"))
    samples = Samples(catalog, codec, None, train=True, seed=5, raw_fraction=raw_fraction, **samples_options)
    return codec, make_loader(samples, order, BATCH, workers, pin_memory=False)


@pytest.mark.parametrize(("raw_fraction", "workers"), [(1.0, 0), (0.5, 2)])
def test_encoded_batches_decode_on_the_device_as_the_workers_decode_them(catalog, raw_fraction, workers):
    """Flips only, at the stored size: the device's tensors equal the workers' exactly, in batch order."""
    _, reference = loader_batches(catalog, 0.0)
    codec, loader = loader_batches(catalog, raw_fraction, workers)
    encoded = list(loader)
    encoded_count = round(raw_fraction * BATCH)
    for images, *_ in encoded:
        assert isinstance(images, EncodedBatch)
        assert images.encoded_at.tolist() == list(range(encoded_count))  # a batch's first samples stay encoded
        assert len(images.jpegs()) == encoded_count and images.crops.shape == (encoded_count, 5)
    decoded = list(DeviceDecoder(codec, catalog, CPU).batches(iter(encoded)))
    assert len(decoded) == len(encoded) == SAMPLES // BATCH
    for (images, labels, ids, skipped), (want, want_labels, want_ids, _) in zip(decoded, reference):
        assert torch.equal(ids, want_ids) and torch.equal(labels, want_labels) and skipped == 0
        assert torch.equal(images, want)


def test_an_encoded_sample_carries_its_seeded_crop(catalog):
    codec = make_codec(catalog.root, catalog, DatasetOptions("standard", 10))
    samples = Samples(catalog, codec, None, train=True, seed=5, raw_fraction=1.0)
    (first, label, sample_id), *_ = samples.__getitems__([(3, 7), (3, 8)])
    assert isinstance(first, RawImage) and (label, sample_id) == (catalog.labels[7], 7)
    assert bytes(first.data.numpy()) == catalog.read_bytes(7)
    torch.manual_seed(augmentation_seed(5, 3, 7))
    assert first.crop == codec.draw_crop(12, 12)


def test_an_undecodable_jpeg_is_named_or_skipped(catalog, tmp_path):
    broken = 11
    path = catalog.path(broken)
    original = path.read_bytes()
    try:
        # cut 40 bytes into the compressed image: its header reads, its image does not
        path.write_bytes(original[: original.index(b"\xff\xda") + 40])
        codec, loader = loader_batches(catalog, 1.0)
        with pytest.raises(DatasetError, match=rf"cannot decode sample {broken} \({catalog.relpaths[broken]}\) on "
                                               r"cpu with loader.decode=gpu: .*loader.on_error=skip"):
            list(DeviceDecoder(codec, catalog, CPU).batches(iter(loader)))
        codec, loader = loader_batches(catalog, 1.0, on_error="skip")
        batches = list(DeviceDecoder(codec, catalog, CPU, on_error="skip").batches(iter(loader)))
        ids = [i for _, _, batch_ids, _ in batches for i in batch_ids.tolist()]
        assert sorted(ids) == sorted(set(range(SAMPLES)) - {broken})
        assert sum(skipped for *_, skipped in batches) == 1
        assert all(len(images) == len(labels) for images, labels, *_ in batches)
        Image.new("RGB", (12, 12)).save(path, format="PNG")  # a PNG under a .jpg name
        codec, loader = loader_batches(catalog, 1.0)
        with pytest.raises(DatasetError, match=rf"sample {broken} .*loader.decode=gpu decodes JPEG only"):
            list(loader)
    finally:
        path.write_bytes(original)
