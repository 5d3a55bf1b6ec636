"""cdictk's settings files, read one way: the runtime's ``config.toml`` (TOML) and the device plugin's
settings (YAML, which ``cdictk node-labels`` reads too). A file is opened without blocking on a FIFO,
read up to :data:`MAX_BYTES`, decoded as UTF-8 and parsed by the strict reader of its format. Every
failure, from a missing file to one nested 20,000 deep, is a :class:`SettingsError`: one line naming
the file, and the key where there is one. What the keys mean is each file's own module's, which raises
the same error. The YAML is parsed where it is read (:mod:`cdictk.deviceplugin.pluginsettings`), since
no container start reads YAML.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import read_fd

MAX_BYTES = 1 << 20


class SettingsError(CdictkError):
    """A settings file, or a flag over one, that cannot be used: ``<file>: <key>: <reason>``."""


def read_text(path: str, *, missing_ok: bool = False) -> str:
    """The text of the settings file at ``path``; "" when there is none and ``missing_ok`` (which
    then reads as an empty file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError as exc:
        if missing_ok:
            return ""
        raise SettingsError(path, "", exc.strerror or "No such file or directory") from exc
    except OSError as exc:
        raise SettingsError(path, "", exc.strerror or str(exc)) from exc
    try:
        data = read_fd(fd, MAX_BYTES)  # one read may stop short: a FUSE or network file, a growing one
    except OSError as exc:  # a directory, a FIFO (non-blocking), an unreadable device
        raise SettingsError(path, "", exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)
    if data is None:
        raise SettingsError(path, "", f"larger than {MAX_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettingsError(path, "", f"not valid UTF-8 (byte {exc.start})") from exc


def parse_toml(text: str, path: str) -> dict[str, object]:
    """The TOML document in ``text``, read from ``path``."""
    import tomllib  # noqa: PLC0415 - only when there is a file to read, and no cached parse of it

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(path, "", str(exc)) from exc
    except RecursionError as exc:  # tomllib recurses into nested arrays and inline tables
        raise SettingsError(path, "", "nested too deeply") from exc
