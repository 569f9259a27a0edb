"""Unordered, multithreaded fetching of one batch: reads in parallel, decodes as reads finish.

The samples of a batch are averaged into one gradient, so the order they arrive in does not
matter (Zhong et al., Rinas, §4.3). A `BatchFetcher` therefore starts every read of a batch at
once on `io_threads` threads and hands each sample to preprocessing the moment its bytes are in
(Rinas §4.4, "parallel dataset indexing" and "overlapped preprocessing"; Yang et al. §III-B run a
thread pool inside each DataLoader worker for the same reason). Items come out in completion
order, so one slow file delays only itself. Reads mostly wait on storage and decoding mostly
computes, so the two get separate pools of their own sizes, as in Lobster's split of threads
between loading and preprocessing (Liu et al., §4.1): many I/O threads, a few decode threads,
or none, in which case the calling thread decodes while the reads go on.

Threads help only where the work releases the GIL: file reads and sleeps do, and so do PIL's
JPEG decoding and torch's tensor operations.

Pools are made on first use in each process. DataLoader workers are forked (or spawned) from
the process that built the dataset; a pool copied into a child by fork has no threads there, so
a fetcher that finds itself in a new process starts pools of its own, and a pickled fetcher
carries none.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from hpcshuffle.errors import at_least

Key = TypeVar("Key", bound=Hashable)
Item = TypeVar("Item")


def add_note(error: BaseException, note: str) -> None:
    """`error.add_note(note)`; on Python 3.10 the note is kept in `__notes__` but not printed."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", []), note]


class BatchFetcher(Generic[Key, Item]):
    """Reads and decodes the samples of a batch on thread pools; items come in completion order.

    Args:
        read: `read(key)` returns the sample's bytes (or anything `decode` takes, e.g. None for
            a sample to skip). Called on an I/O thread.
        decode: `decode(key, data)` returns the item. Called on a decode thread, or on the
            thread that called `fetch` when `decode_threads` is 0. It must be safe to call from
            several threads at once when `decode_threads` > 1.
        io_threads: reads in flight at once (>= 1).
        decode_threads: decodes in flight at once (>= 0; 0: the calling thread decodes).

    An exception from `read` or `decode` ends the fetch: reads and decodes not yet started are
    dropped, and the exception is re-raised in the caller with its type kept and a note naming
    the key and the step that failed.
    """

    def __init__(
        self, read: Callable[[Key], Any], decode: Callable[[Key, Any], Item], io_threads: int, decode_threads: int = 0,
    ) -> None:
        at_least("io_threads", io_threads)
        at_least("decode_threads", decode_threads, 0)
        self.read = read
        self.decode = decode
        self.io_threads = io_threads
        self.decode_threads = decode_threads
        self._pools_pid: int | None = None
        self._io_pool: ThreadPoolExecutor | None = None
        self._decode_pool: ThreadPoolExecutor | None = None

    def fetch(self, keys: Iterable[Key]) -> list[Item]:
        """All items of `keys`, in the order they finished."""
        return list(self.iter_fetch(keys))

    def iter_fetch(self, keys: Iterable[Key]) -> Iterator[Item]:
        """Yields the items of `keys` as they finish; each key's item exactly once."""
        keys = list(keys)
        io_pool, decode_pool = self._pools()
        # (key, step, item or data, error): one per key, put by whichever thread finished it
        finished: queue.SimpleQueue = queue.SimpleQueue()
        abandoned = threading.Event()
        reads = [io_pool.submit(self._read_task, key, decode_pool, finished, abandoned) for key in keys]
        try:
            for _ in keys:
                key, step, value, error = finished.get()
                if error is None and step == "read":
                    try:
                        value = self.decode(key, value)
                    except BaseException as err:  # noqa: BLE001 - re-raised below, key named
                        step, error = "decode", err
                if error is not None:
                    add_note(error, f"hpcshuffle.storage.fetch: {step} of key {key!r} failed")
                    raise error
                yield value
        finally:
            # an error or a consumer that stopped early: start no more work for this batch
            abandoned.set()
            for future in reads:
                future.cancel()

    def _read_task(
        self, key: Key, decode_pool: ThreadPoolExecutor | None, finished: queue.SimpleQueue, abandoned: threading.Event,
    ) -> None:
        if abandoned.is_set():
            return
        try:
            data = self.read(key)
        except BaseException as err:  # noqa: BLE001 - handed to the caller, never lost in a thread
            finished.put((key, "read", None, err))
            return
        if decode_pool is None:
            finished.put((key, "read", data, None))  # the calling thread decodes it
            return
        try:
            decode_pool.submit(self._decode_task, key, data, finished, abandoned)
        except RuntimeError as err:  # the pool was closed meanwhile
            finished.put((key, "decode", None, err))

    def _decode_task(self, key: Key, data: Any, finished: queue.SimpleQueue, abandoned: threading.Event) -> None:
        if abandoned.is_set():
            return
        try:
            finished.put((key, "decoded", self.decode(key, data), None))
        except BaseException as err:  # noqa: BLE001 - handed to the caller, never lost in a thread
            finished.put((key, "decode", None, err))

    def _pools(self) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor | None]:
        """This process's pools, started on first use (pools inherited through fork have no threads here)."""
        if self._pools_pid != os.getpid():
            self._io_pool = ThreadPoolExecutor(self.io_threads, thread_name_prefix="fetch-io")
            self._decode_pool = (
                ThreadPoolExecutor(self.decode_threads, thread_name_prefix="fetch-decode") if self.decode_threads else None
            )
            self._pools_pid = os.getpid()
        return self._io_pool, self._decode_pool

    @property
    def pools_pid(self) -> int | None:
        """The process whose pools this fetcher holds (None before the first fetch or after `close`)."""
        return self._pools_pid

    def close(self) -> None:
        """Stop this process's threads (waiting for running reads and decodes); a later fetch starts new ones."""
        if self._pools_pid == os.getpid():
            for pool in (self._io_pool, self._decode_pool):
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
        # pools of another process (copied by fork) are only forgotten: their threads are not here
        self._pools_pid = self._io_pool = self._decode_pool = None

    def __enter__(self) -> BatchFetcher[Key, Item]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # pickled into a spawned worker: the pools stay behind, the worker starts its own
        return {**self.__dict__, "_pools_pid": None, "_io_pool": None, "_decode_pool": None}
