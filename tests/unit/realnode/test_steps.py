"""realnode/steps.py: how the check runs a command and waits for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from realnode.steps import wait_exact


def test_the_exit_status_comes_back() -> None:
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert wait_exact(process, 30) == 3


def test_a_process_past_its_timeout_raises_and_is_left_to_the_caller() -> None:
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exact(process, 0.2)
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()


def test_no_polling_wait_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # Popen.wait(timeout) sleeps in steps of up to 50 ms, which quantises every start the check times.
    calls: list[object] = []
    real_wait = subprocess.Popen.wait

    def wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        calls.append(timeout)
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    process = subprocess.Popen(["true"])
    assert wait_exact(process, 30) == 0
    assert calls == [None]
