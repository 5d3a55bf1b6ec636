"""A gRPC server on a Unix socket: the one server setup of the node agents the kubelet dials (the
device plugin's resources, the DRA plugin's registration and service sockets).

grpcio's asyncio server runs an event loop in a thread of its own: a servicer's coroutines (calls that
answer from memory, streams waiting for a change) run on that loop and tie up no thread, its plain
functions (calls that may wait) in a small pool of threads beside it. The servicers are added on the
loop, so a servicer may make the asyncio objects it needs there (grpcio's asyncio objects belong to the
loop that made them).

The socket is the server's: a stale one (a killed predecessor's) is removed before listening, and the
socket is removed on stop, as the kubelet's plugins do. grpcio imports only where a node agent runs
(the ``kubernetes`` extra), never from the library API or the start path.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import stat
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from cdictk.startpath.helpers.errors import CdictkError

# What the generated servicers' methods are handed: a context of the threaded or of the asyncio server.
Context = grpc.ServicerContext | grpc.aio.ServicerContext[Any, Any]
SOCKET_PATH_MAX = 107  # sockaddr_un's sun_path, less its terminating NUL
STOP_GRACE = 1.0  # seconds that calls under way get when the server stops


def check_socket_path(path: str, remedy: str) -> str:
    """``path``, or a CdictkError when it is too long for a Unix socket (the bind would fail);
    ``remedy`` says what the user can shorten."""
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        raise CdictkError(
            path, "", f"longer than a Unix socket path may be ({SOCKET_PATH_MAX} bytes): {remedy}"
        )
    return path


def remove_socket(path: str) -> None:
    """Remove what ``path`` names (never through it: a symlink there is removed, not followed), if
    anything; a directory is left and refused in one line."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CdictkError(path, "", f"cannot look at it: {exc.strerror}") from exc
    if stat.S_ISDIR(info.st_mode):
        raise CdictkError(path, "", "a directory where the socket goes; refusing to remove it")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise CdictkError(path, "", f"cannot remove the stale socket: {exc.strerror}") from exc


class UnixServer:
    """A grpcio asyncio server on the Unix socket ``path``. ``add_servicers`` puts the servicers on the
    server (called on the loop at each start); ``workers`` threads run the servicers' plain functions;
    ``remedy`` says how to get a shorter path. Thread-safe: start, stop and call_soon may come from any
    thread."""

    def __init__(
        self,
        path: str,
        add_servicers: Callable[[grpc.aio.Server], None],
        *,
        name: str,
        workers: int = 1,
        remedy: str = "a shorter directory",
    ) -> None:
        self.path = path
        self.name = name
        self._add_servicers = add_servicers
        self._workers = workers
        self._remedy = remedy
        self._lock = threading.Lock()
        self._serving: _Serving | None = None

    def start(self) -> None:
        """Listen on the socket (a stale one removed first); CdictkError when it cannot."""
        check_socket_path(self.path, self._remedy)
        remove_socket(self.path)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
        thread.start()
        pool = futures.ThreadPoolExecutor(self._workers, thread_name_prefix=self.name)
        serving = _Serving(loop, thread, pool)
        try:
            serving.server = asyncio.run_coroutine_threadsafe(self._serve(pool), loop).result()
        except BaseException:
            serving.close()
            raise
        with self._lock:
            self._serving = serving

    async def _serve(self, pool: futures.ThreadPoolExecutor) -> grpc.aio.Server:
        """The server, made, filled and started on the loop."""
        server = grpc.aio.server(migration_thread_pool=pool)
        self._add_servicers(server)
        if server.add_insecure_port(f"unix://{self.path}") == 0:
            raise CdictkError(self.path, "", "cannot listen on this socket")
        await server.start()
        return server

    def call_soon(self, callback: Callable[[], object]) -> bool:
        """Run ``callback`` on the loop, soon; False when not serving (nothing runs)."""
        with self._lock:
            serving = self._serving
        if serving is None:
            return False
        try:
            serving.loop.call_soon_threadsafe(callback)
        except RuntimeError:  # stopped meanwhile: the loop is closed
            return False
        return True

    def stop(self) -> None:
        """Stop serving (calls under way get STOP_GRACE seconds) and remove the socket."""
        with self._lock:
            serving, self._serving = self._serving, None
        if serving is not None:
            serving.close()
            del serving
            # grpcio's asyncio stack shuts itself down when its last object is freed, joining its
            # poller thread: freed here, not by the collector of a child forked later (discovery's
            # NVML query), where that thread does not exist and the join never ends.
            gc.collect()
        with contextlib.suppress(CdictkError):  # a directory put there since: not ours to remove
            remove_socket(self.path)

    @property
    def serving(self) -> bool:
        with self._lock:
            return self._serving is not None

    def socket_gone(self) -> bool:
        """Whether the socket file was removed (a restarted kubelet deletes the device plugins')."""
        return not os.path.lexists(self.path)


@dataclass
class _Serving:
    """A started server: its loop, the loop's thread, the pool of its calls that may wait."""

    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    pool: futures.ThreadPoolExecutor
    server: grpc.aio.Server | None = None

    def close(self) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(STOP_GRACE), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
        self.pool.shutdown(wait=False)
