"""loader.decode=gpu: the training process decodes its batches' JPEGs on its own device.

The loader's workers only read bytes and draw each sample's crop (loader.py, collate.py's `EncodedBatch`);
`DeviceDecoder` decodes a batch's encoded samples in one batched call on the device, crops,
resizes, flips and normalises them there (formats/jpeg_batch.py), and puts them back beside the
samples the workers decoded (loader.gpu_fraction < 1), each at its place in the batch.

Decoding runs one batch ahead on a thread of its own and, on a GPU, on a side CUDA stream: while
the training thread waits for the model's step on batch i, the decoding thread launches batch
i+1's decode (nvjpeg's host-side work included) and the side stream runs it; the training stream
waits only on batch i's event. On the CPU the same code runs with no stream (what the tests
exercise).

A JPEG that nvjpeg cannot decode fails the run naming its sample, or is left out and counted
with loader.on_error=skip, as a worker does with a file it cannot read.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.formats.jpeg_batch import jpeg_failure
from hpcshuffle.storage.collate import EncodedBatch

Batch = tuple[Any, torch.Tensor, torch.Tensor, int]  # (images, labels, sample ids, skipped)


class DeviceDecoder:
    """Turns the loader's batches into batches whose images are one float tensor on `device`.

    Args:
        codec: the dataset's codec; it decodes a batch with `decode_batch(jpegs, crops, device)`.
        catalog: the training split, to name a sample that cannot be decoded.
        on_error: "fail" (a DatasetError naming the sample) or "skip" (left out, counted).
    """

    def __init__(self, codec, catalog: Catalog, device: torch.device, on_error: str = "fail") -> None:
        self.codec, self.catalog, self.device, self.on_error = codec, catalog, device, on_error
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def batches(self, loader_batches: Iterator[Batch]) -> Iterator[Batch]:
        """The loader's batches decoded, each one batch ahead on a thread of its own (and, on a GPU, on
        the side stream), so that its host-side work overlaps the training thread's wait on the GPU.

        The loader is read on the calling thread, as without this decoder: its sampler's loans
        (locality-aware loading) stay on the training thread.
        """
        # an epoch stopped early (or failed) leaves the block after the batch being decoded ends
        with ThreadPoolExecutor(1, thread_name_prefix="device-decode") as decoding:
            ahead: Future | None = None
            for batch in loader_batches:
                started = decoding.submit(self.decode_on_side_stream, batch)
                if ahead is not None:
                    yield self.hand_over(*ahead.result())
                ahead = started
            if ahead is not None:
                yield self.hand_over(*ahead.result())

    def decode_on_side_stream(self, batch: Batch) -> tuple[Batch, torch.cuda.Event | None]:
        """`decode` on the side stream (a GPU) and the event that marks its end there (None on the CPU)."""
        if self.stream is None:
            return self.decode(batch), None
        with torch.cuda.stream(self.stream):
            return self.decode(batch), self.stream.record_event()

    def hand_over(self, batch: Batch, event) -> Batch:
        """`batch` for the training stream: it waits for the side stream's work on it, and the
        memory of its images stays the side stream's until the training stream is done with it."""
        if event is not None:
            training = torch.cuda.current_stream(self.device)
            training.wait_event(event)
            if batch[0] is not None:
                batch[0].record_stream(training)
        return batch

    def decode(self, batch: Batch) -> Batch:
        """One batch with its encoded samples decoded on the device (unchanged if none are encoded)."""
        images, labels, sample_ids, skipped = batch
        if not isinstance(images, EncodedBatch):
            return batch
        decoded, bad = self.decode_jpegs(images, sample_ids)
        keep = torch.ones(len(labels), dtype=torch.bool)
        keep[images.encoded_at[bad]] = False
        labels, sample_ids, skipped = labels[keep], sample_ids[keep], skipped + len(bad)
        if not len(labels):
            return None, labels, sample_ids, skipped
        place = keep.cumsum(0) - 1  # a kept sample's position once the skipped ones are out
        encoded_at = images.encoded_at[keep[images.encoded_at]]
        shape = decoded.shape[1:] if decoded is not None else images.decoded.shape[1:]
        out = torch.empty(len(labels), *shape, dtype=torch.float32, device=self.device)
        if decoded is not None:
            out[place[encoded_at].to(self.device)] = decoded
        if images.decoded is not None:
            out[place[images.decoded_at].to(self.device)] = images.decoded.to(self.device, non_blocking=True)
        return out, labels, sample_ids, skipped

    def decode_jpegs(self, images: EncodedBatch, sample_ids: torch.Tensor) -> tuple[torch.Tensor | None, list[int]]:
        """The encoded samples decoded and augmented on the device, in `images.encoded_at`'s order, and
        the indices of those left out (on_error=skip). A batch with an undecodable JPEG is decoded one
        sample at a time to find it."""
        jpegs = images.jpegs()
        try:
            return self.codec.decode_batch(jpegs, images.crops, self.device), []
        except RuntimeError:
            pass
        rows, bad = [], []
        for index, (jpeg, crop) in enumerate(zip(jpegs, images.crops)):
            try:
                rows.append(self.codec.decode_batch([jpeg], crop[None], self.device))
            except RuntimeError as err:
                sample_id = int(sample_ids[images.encoded_at[index]])
                if self.on_error != "skip":
                    raise DatasetError(
                        f"cannot decode sample {sample_id} ({self.catalog.relpaths[sample_id]}) on {self.device} "
                        f"with loader.decode=gpu: {jpeg_failure(err)}; replace or remove the file, set "
                        "loader.on_error=skip to leave it out (counted as `skipped`), or use loader.decode=cpu"
                    ) from None
                bad.append(index)
        return (torch.cat(rows) if rows else None), bad
