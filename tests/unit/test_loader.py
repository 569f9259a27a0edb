"""Reading samples: seeded augmentation, and unreadable files failing by name or skipped and counted."""

from __future__ import annotations

import pytest
import torch

from hpcshuffle.formats.catalog import DatasetError
from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.formats.imagefolder import make_codec, scan
from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.storage.loader import EpochOrder, Samples, make_loader


@pytest.fixture
def catalog(tmp_path):
    return scan(synth_imagefolder(tmp_path / "src", 24, 2, image_size=12, progress=False), "train")


def ImageSamples(catalog, store_roots, train: bool, **kwargs) -> Samples:  # noqa: N802 - reads like the class
    """Samples of an ImageFolder with flips as the only augmentation."""
    return Samples(catalog, make_codec(catalog.root, catalog, DatasetOptions("flip")), store_roots, train, **kwargs)


def test_augmentation_depends_on_seed_epoch_and_id_only(catalog):
    samples = ImageSamples(catalog, None, train=True, seed=3)
    torch.manual_seed(123)
    first = [samples[(epoch, i)][0] for epoch in range(4) for i in range(6)]
    torch.manual_seed(999)  # the process RNG does not matter ...
    again = [samples[(epoch, i)][0] for epoch in range(4) for i in range(6)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    # ... and it is left alone
    torch.manual_seed(5)
    expected = torch.rand(1)
    torch.manual_seed(5)
    samples[(0, 0)]
    assert torch.equal(torch.rand(1), expected)
    # horizontal flips do happen, and differ between epochs
    flipped = [not torch.equal(samples[(epoch, 0)][0], ImageSamples(catalog, None, train=False)[(0, 0)][0])
               for epoch in range(16)]
    assert 0 < sum(flipped) < 16


def test_worker_processes_augment_alike(catalog):
    batches = []
    for workers in (0, 2):
        order = EpochOrder()
        order.set_order(torch.arange(24).numpy(), epoch=1)
        loader = make_loader(ImageSamples(catalog, None, train=True, seed=3), order, 8, workers, pin_memory=False)
        batches.append(torch.cat([images for images, *_ in loader]))
    assert torch.equal(*batches)


def corrupt(catalog, sample_id: int) -> None:
    path = catalog.path(sample_id)
    path.write_bytes(path.read_bytes()[:40])  # a truncated JPEG


def test_an_unreadable_sample_fails_by_name(catalog):
    corrupt(catalog, 5)
    with pytest.raises(DatasetError, match=rf"cannot read sample 5 \({catalog.relpaths[5]}\).*loader.on_error=skip"):
        ImageSamples(catalog, None, train=True)[(0, 5)]


def test_skipped_samples_leave_the_batch_and_are_counted(catalog):
    for sample_id in (1, 2, 3, 9):
        corrupt(catalog, sample_id)
    order = EpochOrder()
    order.set_order(torch.arange(12).numpy())
    loader = make_loader(ImageSamples(catalog, None, train=True, on_error="skip"), order, 4, 0, pin_memory=False)
    batches = list(loader)
    assert [skipped for *_, skipped in batches] == [3, 0, 1]
    assert [ids.tolist() for _, _, ids, _ in batches] == [[0], [4, 5, 6, 7], [8, 10, 11]]
    assert batches[0][0].shape[0] == 1

    order.set_order(torch.tensor([1, 2, 3]).numpy())
    (images, labels, ids, skipped), = list(loader)
    assert images is None and len(labels) == len(ids) == 0 and skipped == 3
