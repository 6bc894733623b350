"""The worker pool: work whose size a caller chooses runs in killable, memory-capped processes.

Decoding an image, rendering a template or running an agent's SQL can take one library call
that no cooperative check sees (Pillow decoding an ICO's inner PNG, DuckDB's ``repeat``,
Jinja's ``wordwrap``). :func:`run` sends such a call to a pebble ``ProcessPool``: each worker
has an address-space limit (``RLIMIT_AS``) and a lower CPU priority, and a task that passes its
wall-clock limit has its worker killed and replaced, not asked to stop. A key has at most
``worker_per_key`` tasks in the pool at once, so one caller cannot hold every worker.

The server starts the pool (:func:`start`) and kills it at shutdown (:func:`stop`); in a
process that never started it (the CLI, a notebook), :func:`run` calls the function inline.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from aifab.core.actor import current_actor
from aifab.core.errors import AifabError, InvalidInputError
from aifab.core.settings import get_settings

__all__ = ["PoolStoppedError", "WorkerBusyError", "is_running", "run", "start", "stop"]

T = TypeVar("T")


class WorkerBusyError(AifabError):
    """The caller already has ``worker_per_key`` tasks in the pool and none ended in time."""

    http_status = 429
    exit_code = 4


class PoolStoppedError(AifabError):
    """The pool was stopped (the server is shutting down) while the task waited or ran.

    A server-side failure: the gateway answers it as a plain 500.
    """

    http_status = 503


_lock = threading.Lock()
_pool: Any = None  # pebble.ProcessPool once started
#: Set by ``stop(final=True)`` (a SIGTERM) until the next :func:`start`: work arriving while
#: the server shuts down is refused, never run inline in the server's process.
_stopped = False
_per_key: dict[str, threading.BoundedSemaphore] = {}
#: Futures being waited on: :func:`stop` cancels them, as pebble's stop leaves them unresolved.
_waiting: set[Any] = set()


def _limit_worker(memory_bytes: int) -> None:
    """Pool initializer: cap the worker's address space and yield the CPU to request threads."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    os.nice(5)


def start(preload: tuple[str, ...] = ()) -> None:
    """Start the pool (idempotent); workers fork lazily from a fork server on first use.

    With ``AIFAB_WORKER_PROCESSES=0`` nothing starts and :func:`run` calls inline.

    Args:
        preload: modules the fork server imports once (those holding the tasks), so a fresh
            worker (after a kill) starts in milliseconds instead of re-importing Pillow,
            NumPy or DuckDB.
    """
    global _pool, _stopped
    from pebble import ProcessPool

    with _lock:
        settings = get_settings()
        if _pool is not None or settings.worker_processes == 0:
            return
        _stopped = False
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(preload))
        _pool = ProcessPool(
            max_workers=settings.worker_processes,
            initializer=_limit_worker,
            initargs=(settings.worker_memory_mb << 20,),
            context=ctx,
        )
    atexit.unregister(stop)  # once, however often the pool is restarted
    atexit.register(stop)


def stop(*, final: bool = False) -> None:
    """Kill the workers and whatever they are running (the server's shutdown calls this).

    Args:
        final: the process is shutting down (a signal): until a new :func:`start`, :func:`run`
            refuses work instead of running it inline.
    """
    global _pool, _stopped
    with _lock:
        pool, _pool = _pool, None
        _stopped = final
        waiting = list(_waiting)
    for future in waiting:
        future.cancel()  # pebble kills the worker of a running task it cancels
    if pool is not None:
        pool.stop()  # terminates running tasks' workers; nothing is waited for
        pool.join(timeout=2)


def is_running() -> bool:
    """Whether this process sends work to the pool (False: :func:`run` calls inline)."""
    return _pool is not None


def _slot(key: str) -> threading.BoundedSemaphore:
    with _lock:
        sem = _per_key.get(key)
        if sem is None:
            sem = _per_key[key] = threading.BoundedSemaphore(get_settings().worker_per_key)
        return sem


def run(fn: Callable[..., T], *args: Any, timeout_s: float, what: str = "task") -> T:
    """``fn(*args)`` in a worker, killed at ``timeout_s``; inline when no pool is running.

    ``fn`` must be importable by name (a module-level function) and its arguments picklable.
    The caller's key (:func:`~aifab.core.actor.current_actor`) waits for one of its own slots.

    Raises:
        WorkerBusyError: the key's slots stayed taken for ``timeout_s``.
        PoolStoppedError: :func:`stop` was called (the server is shutting down).
        InvalidInputError: the task ran past ``timeout_s`` or over the worker's memory limit
            (its worker was killed), named with ``what``. Exceptions ``fn`` raises come back as
            they are.
    """
    if _pool is None and not _stopped:
        return fn(*args)
    from pebble import ProcessExpired

    slot = _slot(current_actor())
    if not slot.acquire(timeout=timeout_s):
        limit = get_settings().worker_per_key
        raise WorkerBusyError(f"{what}: this key already has {limit} tasks running; retry later")
    try:
        pool = _pool
        try:
            if pool is None:
                raise RuntimeError("stopped")
            future = pool.schedule(fn, args=args, timeout=timeout_s)
        except RuntimeError:  # stopped since this call read it
            raise PoolStoppedError(f"{what} stopped: the server is shutting down") from None
        with _lock:
            _waiting.add(future)
            if _pool is not pool:  # stopped between scheduling and here
                future.cancel()
        try:
            result: T = future.result()
        except CancelledError:
            raise PoolStoppedError(f"{what} stopped: the server is shutting down") from None
        except FutureTimeout:
            raise InvalidInputError(
                f"{what} stopped at its time limit ({timeout_s:g} s); its worker was killed"
            ) from None
        except MemoryError:
            raise InvalidInputError(
                f"{what} went over the worker memory limit ({get_settings().worker_memory_mb} MB)"
            ) from None
        except ProcessExpired as exc:
            raise InvalidInputError(
                f"{what} ended its worker (exit code {exc.exitcode}); "
                "likely over the worker memory limit"
            ) from None
        finally:
            with _lock:
                _waiting.discard(future)
        return result
    finally:
        slot.release()
