"""Fetches of remote objects (a bucket's chunks): read ahead, bounded, retried, counted.

Below a remote store array (``looptoolkit.stores._zarr.RemoteZarr``): it names the
objects it needs (key, size and version from one LIST, so no metadata request
per object), in the order it will need them, and takes their bytes when it
reads. A [`Fetcher`][looptoolkit.stores._remote.Fetcher] runs every request of
its process on one background event loop (made on first use and made again in a
child after a fork), with at most ``ahead_bytes`` bytes fetched but not yet
taken. The ``in_flight`` bound holds across every fetcher of the process that
reads the same place with the same bound (the arrays of a group, a file's
columns): they share one [`Gate`][looptoolkit.stores._remote.Gate], which grants
requests a read is waiting for first, then the others in the order they were
asked for (the order's first use), so the next batch's objects never queue
behind ones needed later.

Every request is retried here and nowhere else: a throttle (503 SlowDown, 429),
a server error, a reset connection, a timeout, a body shorter or longer than the
object's listed size, and a request slower than its deadline (restarted) are
tried again after a backoff with full jitter, up to ``attempts`` times; then the
read raises naming the object and the attempts. Credentials never appear in a
message, a counter or a pickle: clients are made in the process that uses them,
from what the user passed and where the client library looks for the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Counters", "Fetcher", "ObjectRef", "RemoteReadError", "Settings", "event_loop"]
__all__ += ["ForkedAfterRead", "unlisted"]

# Chosen from benchmarks/bucket_in_flight.py (the bucket workload's Loader epochs, 196
# objects): with 20 ms a request, grouped epochs of 654 / 393 / 312 / 335 / 312 ms at
# 8 / 16 / 32 / 64 / 128 in flight (the local server's own time is the floor past 32);
# with 50 ms, 809 / 478 / 386 / 375 ms at 16 / 32 / 64 / 128. One bound per process and
# bucket. Bytes ahead: a few groups of chunks, well within a host's memory.
IN_FLIGHT = 64
AHEAD_BYTES = 64 << 20
# Objects taken by reads are kept in memory up to this many bytes (least recently used
# out): an order that reads a chunk's rows over a few batches fetches it once.
RECENT_BYTES = 32 << 20
ATTEMPTS = 6
BACKOFF_S = 0.05  # the first retry waits up to this long; each later one twice as long
MAX_BACKOFF_S = 2.0
# A request's deadline: this long plus its bytes at DEADLINE_RATE bytes/s; a request
# still running then is restarted (it counts as an attempt).
DEADLINE_S = 5.0
DEADLINE_RATE = 8 << 20


class RemoteReadError(OSError):
    """A remote object could not be read after every attempt."""


@dataclass(frozen=True)
class ObjectRef:
    """One object (or the bytes ``start:start + size`` of one): key, size, version (an ETag)."""

    key: str
    size: int
    version: str = ""
    start: int = 0


@dataclass(frozen=True)
class Settings:
    """How a store's objects are fetched (see the module's docstring)."""

    in_flight: int = IN_FLIGHT
    ahead_bytes: int = AHEAD_BYTES
    attempts: int = ATTEMPTS
    deadline_s: float = DEADLINE_S
    backoff_s: float = BACKOFF_S

    def __post_init__(self) -> None:
        for name in ("in_flight", "ahead_bytes", "attempts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
            if value < 1:
                raise ValueError(f"`{name}` must be >= 1, got {value}.")
        for name in ("deadline_s", "backoff_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"`{name}` must be > 0, got {getattr(self, name)}.")


@dataclass
class Counters:
    """What a process's fetches did, for the Loader's ``stats``.

    Attributes:
        requests: requests sent (retries and LISTs included).
        bytes_fetched: bytes of the bodies received in full.
        bytes_used: bytes of the objects the reads took (a chunk taken twice counts twice).
        retries: requests tried again (a fault, a short body, a deadline passed).
        cache_hits: objects served by the disk cache; ``cache_bytes``: their bytes.
        in_flight_bound: the most requests allowed in flight; ``max_in_flight``: reached.
        ahead_bytes_bound: the most bytes fetched ahead of the reads.
    """

    requests: int = 0
    bytes_fetched: int = 0
    bytes_used: int = 0
    retries: int = 0
    cache_hits: int = 0
    cache_bytes: int = 0
    in_flight_bound: int = 0
    max_in_flight: int = 0
    ahead_bytes_bound: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, int]:
        return {
            name: getattr(self, name)
            for name in (
                "requests",
                "bytes_fetched",
                "bytes_used",
                "retries",
                "cache_hits",
                "cache_bytes",
                "in_flight_bound",
                "max_in_flight",
                "ahead_bytes_bound",
            )
        }


# -- the process's event loop -------------------------------------------------------

_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_loop_lock = threading.Lock()


def event_loop() -> asyncio.AbstractEventLoop:
    """This process's background event loop, started on first use (again after a fork).

    A child made by fork inherits the parent's loop object but not its thread:
    the pid says whose it is.
    """
    global _loop
    with _loop_lock:
        if _loop is not None and _loop[0] == os.getpid():
            return _loop[1]
        loop = asyncio.new_event_loop()
        _gates.clear()  # the parent's, if forked: bound to a loop this process lacks
        thread = threading.Thread(
            target=loop.run_forever, name="looptoolkit-remote-reads", daemon=True
        )
        thread.start()
        _loop = (os.getpid(), loop)
        return loop


class Gate:
    """At most ``bound`` requests at once on one event loop, granted by priority.

    A request takes a slot with ``acquire(priority)`` and gives it back with
    ``release()``; while none is free, the waiter with the lowest priority (then
    the earliest) is granted the next. Used only on its loop's thread.

    Attributes:
        busy: slots taken now; ``most``: the most taken at once.
    """

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.busy = 0
        self.most = 0
        self._waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self._count = itertools.count()

    async def acquire(self, priority: float) -> None:
        if self.busy < self.bound and not self._waiting:
            self._take()
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._count), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # granted as it was cancelled: pass the slot on
            raise

    def _take(self) -> None:
        self.busy += 1
        self.most = max(self.most, self.busy)

    def release(self) -> None:
        """Give a slot back: to the first waiter still waiting, or free it."""
        self.busy -= 1
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():
                self._take()
                granted.set_result(None)
                return


# The gates of this process's loop, by (place, bound); made again with the loop.
_gates: dict[tuple[str, int], Gate] = {}
# The order in which this process's fetchers asked for objects ahead: their priority.
_asked = itertools.count()


def gate_for(where: str, bound: int) -> Gate:
    """The gate shared by this process's fetchers of ``where`` with ``bound`` in flight."""
    key = (where, bound)
    gate = _gates.get(key)
    if gate is None:
        gate = _gates[key] = Gate(bound)
    return gate


# A request: (key, start, end) -> the bytes; raises what the client raises.
Request = Callable[[str, int, int], Awaitable[bytes]]
# A request of a whole object not listed yet: key -> (bytes, size, version), None if missing.
WholeRequest = Callable[[str], Awaitable["tuple[bytes, int, str] | None"]]


def unlisted(key: str) -> ObjectRef:
    """The object ``key`` before its LIST arrives: fetched whole, size and version unknown."""
    return ObjectRef(key, -1)


class ForkedAfterRead(RuntimeError):
    """This process was forked after its parent's client started: raised as it is, not retried."""


class Fatal(Exception):
    """A client error that no retry mends (a missing object, a refused credential)."""


class Fetcher:
    """Fetches objects for one store's leaves: ahead of the reads, bounded, retried.

    Args:
        request: a coroutine function ``(key, start, end) -> bytes`` (one GET of a
            byte range) made in this process; it raises `Fatal` for what no retry mends.
        settings: the bounds and the retry policy.
        counters: where the fetches are counted.
        cache: a disk cache (``get(ref)``, ``put(ref, data)``), or None.
        where: the store's address for messages (never credentials).
        whole: a coroutine function ``key -> (bytes, size, version)`` (None for a
            missing object): one GET of a whole object whose LIST has not arrived
            (`prefetch_unlisted`), or None.
    """

    def __init__(
        self,
        request: Request,
        settings: Settings,
        counters: Counters,
        cache: Any = None,
        where: str = "",
        whole: WholeRequest | None = None,
    ) -> None:
        self.request = request
        self.whole = whole
        self.settings = settings
        self.counters = counters
        self.cache = cache
        self.where = where
        self.loop = event_loop()
        self.pid = os.getpid()
        counters.in_flight_bound = settings.in_flight
        counters.ahead_bytes_bound = settings.ahead_bytes
        self._gate: Gate | None = None
        self._lock = threading.Lock()
        self._ahead: dict[ObjectRef, Future[bytes]] = {}  # fetched or being fetched, not taken
        self._ahead_bytes = 0
        self._recent: OrderedDict[ObjectRef, bytes] = OrderedDict()  # taken lately
        self._recent_bytes = 0
        # Objects fetched before their LIST: the bytes they were guessed at, and the
        # (size, version) each GET answered (None: missing), checked against the LIST.
        self._guess: dict[ObjectRef, int] = {}
        self._seen: dict[str, tuple[int, str] | None] = {}

    @property
    def ahead_bytes(self) -> int:
        """Bytes of the objects asked for ahead and not taken yet."""
        return self._ahead_bytes

    def prefetch(self, refs: list[ObjectRef]) -> None:
        """Start fetching ``refs`` (in this order), unless being fetched or in the disk cache.

        An object the disk cache holds is read from it when it is taken, in the
        reading thread (a file read, no request): it is not fetched ahead.
        """
        cache = self.cache
        with self._lock:
            new = [ref for ref in dict.fromkeys(refs) if ref not in self._ahead]
            if cache is not None:
                new = [ref for ref in new if not cache.has(ref)]
            for ref, future in zip(new, self._start(new), strict=True):
                self._ahead[ref] = future
                self._ahead_bytes += ref.size

    def prefetch_unlisted(self, keys: list[str], guess: int) -> None:
        """Start fetching whole objects ``keys`` before the pass's LIST has told their sizes.

        Each counts ``guess`` bytes ahead. A read takes one by its listed
        [`ObjectRef`][looptoolkit.stores._remote.ObjectRef] and checks the size and
        version its GET answered against the LIST's (another is fetched again).
        """
        refs = [unlisted(key) for key in dict.fromkeys(keys)]
        with self._lock:
            new = [ref for ref in refs if ref not in self._ahead]
            for ref, future in zip(new, self._start(new), strict=True):
                self._ahead[ref] = future
                self._guess[ref] = guess
                self._ahead_bytes += guess

    def _start(self, refs: list[ObjectRef], now: bool = False) -> list[Future[bytes]]:
        """Futures of ``refs``' bytes, their fetches started on the loop with one wake-up.

        One call into the loop's thread for all of them, not one each: every call
        writes to the loop's wake-up socket and waits for the GIL. ``now``: a read
        waits for them (they go before every object asked for ahead).
        """
        futures: list[Future[bytes]] = [Future() for _ in refs]
        if refs:
            asked = [-1.0 if now else float(next(_asked)) for _ in refs]
            work = list(zip(refs, futures, asked, strict=True))
            self.loop.call_soon_threadsafe(self._spawn, work)
        return futures

    def _spawn(self, work: list[tuple[ObjectRef, Future[bytes], float]]) -> None:
        """Start a task per object on the loop, each passing its outcome to its future."""
        for ref, future, priority in work:
            if future.cancelled():
                continue
            task = self.loop.create_task(self._obtain(ref, priority))
            future.add_done_callback(functools.partial(_cancel_with, task))
            task.add_done_callback(functools.partial(_settle, future=future))

    def forget(self) -> None:
        """Drop what was fetched ahead and not taken, and what was kept (a pass ended)."""
        with self._lock:
            ahead, self._ahead, self._ahead_bytes = self._ahead, {}, 0
            self._recent.clear()
            self._recent_bytes = 0
            self._guess.clear()
            self._seen.clear()
        for future in ahead.values():
            future.cancel()

    def take(self, refs: list[ObjectRef]) -> list[bytes]:
        """The bytes of ``refs``: fetched ahead, from the disk cache, or fetched now (together).

        Raises:
            RemoteReadError: an object could not be read (named, with the attempts).
        """
        futures: list[Future[bytes] | bytes | None] = []
        missing: list[ObjectRef] = []
        checked: list[int] = []  # fetched before their LIST: check what the GET answered
        with self._lock:
            for i, ref in enumerate(refs):
                kept = self._recent.get(ref)
                if kept is None and ref.size >= 0 and ref.start == 0:  # taken before the LIST?
                    kept = self._recent.get(unlisted(ref.key))
                    if kept is not None:
                        checked.append(i)
                if kept is not None:
                    futures.append(kept)
                    continue
                future = self._ahead.pop(ref, None)
                if future is None and ref.start == 0 and unlisted(ref.key) in self._ahead:
                    future = self._ahead.pop(unlisted(ref.key))
                    self._ahead_bytes -= self._guess.pop(unlisted(ref.key), 0)
                    self._ahead_bytes += ref.size  # taken off below, as for any object
                    checked.append(i)
                if future is None:
                    kept = self._from_cache(ref)
                    if kept is not None:
                        futures.append(kept)
                        continue
                    missing.append(ref)
                else:
                    self._ahead_bytes -= self._guess.pop(ref, 0) if ref.size < 0 else ref.size
                futures.append(future)
        started = iter(self._start(list(dict.fromkeys(missing)), now=True))
        now = {ref: next(started) for ref in dict.fromkeys(missing)}
        out = [
            f if isinstance(f, bytes) else (now[ref] if f is None else f).result()
            for ref, f in zip(refs, futures, strict=True)
        ]
        # An object fetched before its LIST whose GET answered another size or version
        # (it changed in between, or is missing) is fetched again as listed.
        again = [
            i for i in checked if self._seen.get(refs[i].key) != (refs[i].size, refs[i].version)
        ]
        for i, future in zip(again, self._start([refs[i] for i in again], now=True), strict=True):
            out[i] = future.result()
        self.counters.add(bytes_used=sum(len(b) for b in out))
        with self._lock:
            for ref, data in zip(refs, out, strict=True):
                if ref not in self._recent and len(data) <= RECENT_BYTES:
                    self._recent[ref] = data
                    self._recent_bytes += len(data)
            while self._recent_bytes > RECENT_BYTES:
                _, old = self._recent.popitem(last=False)
                self._recent_bytes -= len(old)
        return out

    def answered(self, key: str) -> tuple[int, str] | None:
        """The size and version the GET of unlisted object ``key`` answered; None: missing.

        For an object taken by `unlisted(key)` in this pass (a missing one's bytes are empty).
        """
        return self._seen.get(key)

    def _from_cache(self, ref: ObjectRef) -> bytes | None:
        """``ref``'s bytes from the disk cache (counted as a hit), or None."""
        if self.cache is None or ref.size < 0:
            return None
        data: bytes | None = self.cache.get(ref)
        if data is not None:
            self.counters.add(cache_hits=1, cache_bytes=len(data))
        return data

    async def _obtain(self, ref: ObjectRef, priority: float) -> bytes:
        cache = self.cache
        if cache is not None and ref.size >= 0:
            data = await asyncio.to_thread(self._from_cache, ref)
            if data is not None:
                return data
        data = await self._fetch(ref, priority)
        if cache is not None and ref.size >= 0:
            # A full or read-only disk: the read goes on without the cache.
            with contextlib.suppress(OSError):
                await asyncio.to_thread(cache.put, ref, data)
        return data

    async def _fetch(self, ref: ObjectRef, priority: float) -> bytes:
        """The bytes of ``ref`` (a whole object, or a range of one), one ranged GET, retried."""
        settings = self.settings
        if self._gate is None:
            self._gate = gate_for(self.where, settings.in_flight)
        gate = self._gate
        deadline = settings.deadline_s + ref.size / DEADLINE_RATE
        last: BaseException | None = None
        for attempt in range(settings.attempts):
            if attempt:
                self.counters.add(retries=1)
                cap = min(MAX_BACKOFF_S, settings.backoff_s * 2 ** (attempt - 1))
                await asyncio.sleep(random.uniform(0, cap))  # full jitter
            await gate.acquire(priority)
            try:
                self.counters.max_in_flight = max(self.counters.max_in_flight, gate.busy)
                self.counters.add(requests=1)
                try:
                    if ref.size < 0:  # not listed yet: the whole object, its size as answered
                        whole = await asyncio.wait_for(self._whole(ref.key), deadline)
                        if whole is None:
                            self._seen[ref.key] = None
                            return b""
                        data, size, version = whole
                        if len(data) != size:
                            last = OSError(f"a body of {len(data)} bytes where {size} were sent")
                            continue
                        self._seen[ref.key] = (size, version)
                        self.counters.add(bytes_fetched=len(data))
                        return bytes(data)
                    data = await asyncio.wait_for(
                        self.request(ref.key, ref.start, ref.start + ref.size), deadline
                    )
                except ForkedAfterRead:
                    raise  # no retry mends it, and its message names the start methods
                except Fatal as error:
                    raise RemoteReadError(
                        f"{self.where}{ref.key} could not be read: {error}"
                    ) from None
                except asyncio.TimeoutError:
                    last = TimeoutError(f"no whole body within the deadline of {deadline:.1f} s")
                    continue
                except Exception as error:  # any other failure of the client: try again
                    last = error
                    continue
            finally:
                gate.release()
            if len(data) != ref.size:
                last = OSError(f"a body of {len(data)} bytes where {ref.size} were listed")
                continue
            self.counters.add(bytes_fetched=len(data))
            return bytes(data)
        raise RemoteReadError(
            f"{self.where}{ref.key} could not be read in {settings.attempts} attempts; "
            f"the last failed with {_describe(last)}."
        )

    def listing(self, list_fn: Callable[[], Any]) -> Future[Any]:
        """``list_fn()`` (a LIST: blocking) run on the loop's threads within the bound in flight.

        It goes before every object waited for or asked for ahead.
        """

        async def listed() -> Any:
            if self._gate is None:
                self._gate = gate_for(self.where, self.settings.in_flight)
            gate = self._gate
            await gate.acquire(-2.0)
            try:
                self.counters.max_in_flight = max(self.counters.max_in_flight, gate.busy)
                return await asyncio.to_thread(list_fn)
            finally:
                gate.release()

        return asyncio.run_coroutine_threadsafe(listed(), self.loop)

    def _whole(self, key: str) -> Awaitable[tuple[bytes, int, str] | None]:
        if self.whole is None:
            raise RuntimeError("this fetcher has no request of whole unlisted objects.")
        return self.whole(key)


def _cancel_with(task: asyncio.Task[bytes], future: Future[bytes]) -> None:
    """Cancel ``task`` when the future a reading thread held was cancelled (a pass ended)."""
    if future.cancelled():
        task.get_loop().call_soon_threadsafe(task.cancel)


def _settle(task: asyncio.Task[bytes], future: Future[bytes]) -> None:
    """Pass a finished task's outcome to the future a reading thread waits on."""
    if future.done():
        return
    if task.cancelled():
        future.cancel()
    elif (error := task.exception()) is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())


def _describe(error: BaseException | None) -> str:
    """An error's type and the first line of its message (clients put no credentials there)."""
    if error is None:
        return "nothing"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def timed_call(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took."""
    start = time.perf_counter()
    return fn(), time.perf_counter() - start
