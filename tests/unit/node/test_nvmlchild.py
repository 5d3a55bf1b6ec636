"""The one NVML runner: a job in a forked child, pynvml pointed at the library asked (judged again
there), its messages framed back; a deadline, a crash or bytes that are no message are one NvmlError,
the child killed and reaped."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cdictk.node import nvmlchild
from cdictk.node.nvmlchild import NvmlChild, Send
from cdictk.node.nvmllib import NvmlError

# A library the runner may load (root's, as libc is): these jobs ask it nothing of NVML's.
LIBRARY = next(
    line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/libc.so" in line
)


def pointed(nvml: Any, argument: object, send: Send) -> None:
    send({"library": nvml.nvmlLib._name, "cached": len(nvml._nvmlGetFunctionPointer_cache), "arg": argument})


def test_pynvml_is_pointed_at_the_library_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    pynvml._nvmlGetFunctionPointer_cache["stale"] = object()  # looked up in another library: forgotten
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    with NvmlChild(pointed) as child:
        child.ask(LIBRARY, {"uuids": ["GPU-a"]})
        assert child.answer() == {"library": LIBRARY, "cached": 0, "arg": {"uuids": ["GPU-a"]}}
    pynvml._nvmlGetFunctionPointer_cache.pop("stale")
    assert pynvml.nvmlLib is None  # this process never loaded it


@pytest.mark.root
def test_a_library_that_is_not_roots_alone_is_never_loaded(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    lib = tmp_path / "lib" / "libnvidia-ml.so.1"
    lib.parent.mkdir()
    lib.write_bytes(Path(LIBRARY).read_bytes())
    os.chown(lib, 1234, 1234)

    def job(_nvml: Any, _argument: object, send: Send) -> None:
        ran.write_text("ran")
        send({})

    with NvmlChild(job) as child:
        child.ask(str(lib))
        with pytest.raises(NvmlError, match="owned by uid 1234, not root: not loaded") as info:
            child.answer()
    assert info.value.absent and not ran.exists()


def hangs(_nvml: Any, _argument: object, _send: Send) -> None:
    time.sleep(600)


def test_the_deadline_kills_and_reaps_the_child() -> None:
    child = NvmlChild(hangs, deadline=0.3)
    pid = child._pid
    assert pid is not None
    child.ask(LIBRARY)
    started = time.monotonic()
    with pytest.raises(NvmlError, match=r"no answer within 0\.3 s: the driver may be hung"):
        child.answer()
    assert time.monotonic() - started < 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left behind


def crashes(_nvml: Any, _argument: object, _send: Send) -> None:
    os.abort()


def raises(_nvml: Any, _argument: object, _send: Send) -> None:
    raise RuntimeError("two\nlines")


def test_a_child_that_crashes_or_raises_is_one_line() -> None:
    with NvmlChild(crashes) as child:
        child.ask(LIBRARY)
        with pytest.raises(NvmlError, match=r"the child ended without an answer \(killed by signal 6\)$"):
            child.answer()
    with NvmlChild(raises) as child:
        child.ask(LIBRARY)
        with pytest.raises(NvmlError, match=r": RuntimeError: two lines$"):
            child.answer()


def says_hello(_nvml: Any, _argument: object, send: Send) -> None:
    send({"hello": 1})


@pytest.mark.parametrize(
    ("frame", "said"),
    [
        (b"\x00\x00\x00\x64abc", "a message cut short"),
        (b"\x00\x00\x00\x04junk", "bytes that are no message"),
        (b"\x00\x00\x00\x01N", "bytes that are no message"),  # marshal's None: not a message
        (b"\xff\xff\xff\xff", "a message of 4294967295 bytes"),
    ],
)
def test_bad_wire_data_is_an_error_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, frame: bytes, said: str
) -> None:
    real = nvmlchild._frame
    # The child's frames, not the parent's question: the forked child inherits the patch.
    monkeypatch.setattr(
        nvmlchild, "_frame", lambda message: frame if isinstance(message, dict) else real(message)
    )
    with NvmlChild(says_hello) as child:
        child.ask(LIBRARY)
        with pytest.raises(NvmlError, match=f"the child sent {said}$"):
            child.answer()
        assert child._pid is None  # killed and reaped


def streams(_nvml: Any, _argument: object, send: Send) -> None:
    for n in range(3):
        send({"n": n})
    time.sleep(600)


def test_a_stream_is_read_until_the_child_is_killed_from_another_thread() -> None:
    child = NvmlChild(streams)
    child.ask(LIBRARY)
    assert [child.receive(), child.receive(), child.receive()] == [{"n": 0}, {"n": 1}, {"n": 2}]
    threading.Timer(0.2, child.kill).start()
    assert child.receive() is None  # without a deadline: until it ends
    assert child.status == "killed by signal 9" and child._pid is None
    child.close()


def test_a_child_never_asked_ends_at_close_and_answers_nothing() -> None:
    child = NvmlChild(says_hello)
    pid = child._pid
    assert pid is not None
    child.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    with pytest.raises(NvmlError, match="has ended"):
        child.receive()
