"""Unordered threaded fetching: completion order, the same tensors as one-by-one reading, errors by name, fork safety."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time

import pytest
import torch

from hpcshuffle.formats.catalog import DatasetError
from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.formats.imagefolder import make_codec, scan
from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.storage.fetch import BatchFetcher
from hpcshuffle.storage.loader import EpochOrder, Samples, make_loader
from tests.conftest import budget

NUM_SAMPLES = 24


@pytest.fixture
def catalog(tmp_path):
    return scan(synth_imagefolder(tmp_path / "src", NUM_SAMPLES, 2, image_size=16, progress=False), "train")


def image_samples(catalog, io_threads: int = 1, decode_threads: int = 0, **kwargs) -> Samples:
    """Training samples with random crops and flips: many draws from torch's RNG per sample."""
    codec = make_codec(catalog.root, catalog, DatasetOptions("standard", 8))
    return Samples(catalog, codec, None, True, seed=7, io_threads=io_threads, decode_threads=decode_threads, **kwargs)


def corrupt(catalog, sample_id: int) -> None:
    path = catalog.path(sample_id)
    path.write_bytes(path.read_bytes()[:40])  # a truncated JPEG


def slow_first_read(key: int) -> str:
    time.sleep(0.3 if key == 0 else 0.01)
    return f"bytes of {key}"


def tag(key: int, data: str) -> tuple[int, str]:
    return key, data


@pytest.mark.parametrize("decode_threads", [0, 2])
def test_items_come_in_completion_order_each_key_once(decode_threads):
    with BatchFetcher(slow_first_read, tag, io_threads=4, decode_threads=decode_threads) as fetcher:
        items = fetcher.fetch(range(12))
    keys = [key for key, _ in items]
    assert keys[-1] == 0, "the slow first read should finish last"
    assert sorted(keys) == list(range(12))
    assert all(data == f"bytes of {key}" for key, data in items)


def test_threaded_batches_hold_the_same_tensors_per_sample_id(catalog):
    sequential = image_samples(catalog)
    threaded = image_samples(catalog, io_threads=6, decode_threads=3)
    for epoch in (0, 1):
        keys = [(epoch, sample_id) for sample_id in range(NUM_SAMPLES)]
        items = threaded.__getitems__(keys)
        assert sorted(sample_id for *_, sample_id in items) == list(range(NUM_SAMPLES))
        for image, label, sample_id in items:
            expected_image, expected_label, _ = sequential[(epoch, sample_id)]
            assert torch.equal(image, expected_image) and label == expected_label
    threaded.fetcher.close()


def test_threaded_loader_workers_train_on_the_same_tensors(catalog):
    by_id = []
    for samples, workers in ((image_samples(catalog), 0), (image_samples(catalog, 4, 1), 2)):
        order = EpochOrder()
        order.set_order(torch.randperm(NUM_SAMPLES, generator=torch.Generator().manual_seed(1)).numpy(), epoch=3)
        loader = make_loader(samples, order, 8, workers, pin_memory=False)
        by_id.append({sample_id: image for images, _, ids, _ in loader for image, sample_id in zip(images, ids.tolist())})
    assert by_id[0].keys() == by_id[1].keys() == set(range(NUM_SAMPLES))
    assert all(torch.equal(by_id[0][i], by_id[1][i]) for i in range(NUM_SAMPLES))


def test_an_unreadable_sample_fails_the_batch_by_name(catalog):
    corrupt(catalog, 5)
    samples = image_samples(catalog, io_threads=4)
    with pytest.raises(DatasetError, match=rf"cannot read sample 5 \({catalog.relpaths[5]}\)") as failure:
        samples.__getitems__([(0, i) for i in range(NUM_SAMPLES)])
    assert "decode of key (0, 5) failed" in "\n".join(failure.value.__notes__)


def test_a_read_error_keeps_its_type_and_names_the_key():
    def read(key: str) -> bytes:
        if key == "b.jpg":
            raise FileNotFoundError(2, "No such file or directory", key)
        return b""

    with BatchFetcher(read, tag, io_threads=3) as fetcher, pytest.raises(FileNotFoundError, match="b.jpg") as failure:
        fetcher.fetch(["a.jpg", "b.jpg", "c.jpg"])
    assert failure.value.__notes__ == ["hpcshuffle.storage.fetch: read of key 'b.jpg' failed"]


def test_a_missing_file_fails_by_name(catalog):
    catalog.path(3).unlink()
    with pytest.raises(DatasetError, match=rf"cannot read sample 3 \({catalog.relpaths[3]}\)") as failure:
        image_samples(catalog, io_threads=4, decode_threads=1).__getitems__([(0, i) for i in range(8)])
    assert "read of key (0, 3) failed" in "\n".join(failure.value.__notes__)


def test_skipped_samples_are_none_items_and_counted(catalog):
    for sample_id in (1, 2, 9):
        corrupt(catalog, sample_id)
    catalog.path(4).unlink()
    samples = image_samples(catalog, io_threads=4, decode_threads=2, on_error="skip")
    items = samples.__getitems__([(0, i) for i in range(12)])
    assert len(items) == 12 and sum(item is None for item in items) == 4
    assert sorted(item[2] for item in items if item is not None) == [0, 3, 5, 6, 7, 8, 10, 11]

    order = EpochOrder()
    order.set_order(torch.arange(12).numpy())
    batches = list(make_loader(samples, order, 4, 0, pin_memory=False))
    assert [skipped for *_, skipped in batches] == [2, 1, 1]
    assert sorted(sample_id for _, _, ids, _ in batches for sample_id in ids.tolist()) == [0, 3, 5, 6, 7, 8, 10, 11]


def fetch_in_child(fetcher: BatchFetcher, results: multiprocessing.Queue) -> None:
    items = fetcher.fetch(range(6))
    results.put((fetcher.pools_pid == os.getpid(), sorted(key for key, _ in items)))


def test_a_forked_child_starts_its_own_pools():
    fetcher = BatchFetcher(slow_first_read, tag, io_threads=3, decode_threads=1)
    fetcher.fetch(range(3))  # the parent's pools now exist, threads and all
    assert fetcher.pools_pid == os.getpid()
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=fetch_in_child, args=(fetcher, results))
    child.start()
    child.join(timeout=budget(10))
    if child.is_alive():  # a child using its parent's (threadless) pools would wait forever
        child.kill()
        pytest.fail("fetching in a forked child hung")
    assert child.exitcode == 0
    assert results.get(timeout=budget(1)) == (True, list(range(6)))
    assert fetcher.fetch(range(4)) and fetcher.pools_pid == os.getpid()  # the parent's pools still serve it
    fetcher.close()
    assert fetcher.pools_pid is None


def test_a_pickled_dataset_carries_no_pools(catalog):
    samples = image_samples(catalog, io_threads=4, decode_threads=1)
    before = samples.__getitems__([(0, i) for i in range(6)])
    copy = pickle.loads(pickle.dumps(samples))  # as a spawned DataLoader worker receives it
    assert copy.fetcher.pools_pid is None
    after = {item[2]: item[0] for item in copy.__getitems__([(0, i) for i in range(6)])}
    assert all(torch.equal(image, after[sample_id]) for image, _, sample_id in before)
    samples.fetcher.close()
    copy.fetcher.close()


def test_close_stops_the_threads_and_a_later_fetch_restarts_them():
    def current_thread(key: int, data: str) -> threading.Thread:
        return threading.current_thread()

    fetcher = BatchFetcher(slow_first_read, current_thread, io_threads=2, decode_threads=1)
    decoders = set(fetcher.fetch(range(3)))
    assert [thread.name for thread in decoders] == ["fetch-decode_0"]
    fetcher.close()
    assert not any(thread.is_alive() for thread in decoders)
    assert len(fetcher.fetch(range(3))) == 3
    fetcher.close()
