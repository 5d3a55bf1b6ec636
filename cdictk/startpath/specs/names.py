"""CDI names: vendor, class and device-name syntax, and fully qualified ``vendor.com/class=name``.

The syntax is the reference library's: letters first for vendor and class, no length limits, a colon
allowed inside device names; :func:`kind_problem` adds, when asked, the CDI specification's stricter
limits for a ``kind``. The one checker of CDI names: the spec loader, the spec cache, the runtime
shim's requests, the spec generator and the device plugin all use it, so it runs on every container
start and is written with ``str`` methods, without :mod:`re`, :mod:`typing` or :mod:`dataclasses`.
"""

from __future__ import annotations

_DIGITS = frozenset("0123456789")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ALNUM = _LETTERS | _DIGITS
_VENDOR_CHARS = _ALNUM | {"_", ".", "-"}
_NAME_CHARS = _VENDOR_CHARS | {":"}
_MAX_VENDOR = 253  # a DNS subdomain's limit
_MAX_CLASS = 63
MAX_SHOWN = 200  # characters of a bad value repeated in a message


class QualifiedName:
    """``vendor/class=name``, checked. Compared and hashed by value."""

    __slots__ = ("cls", "name", "vendor")

    def __init__(self, vendor: str, cls: str, name: str) -> None:
        self.vendor = vendor
        self.cls = cls
        self.name = name

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.cls}"

    def __str__(self) -> str:
        return f"{self.vendor}/{self.cls}={self.name}"

    def __repr__(self) -> str:
        return f"QualifiedName(vendor={self.vendor!r}, cls={self.cls!r}, name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QualifiedName):
            return NotImplemented
        return (self.vendor, self.cls, self.name) == (other.vendor, other.cls, other.name)

    def __hash__(self) -> int:
        return hash((self.vendor, self.cls, self.name))


def quote(text: str) -> str:
    """``text`` in double quotes, on one line: control characters escaped, long values cut."""
    cut = len(text) > MAX_SHOWN
    if cut:
        text = text[:MAX_SHOWN]
    if not text.isprintable() or '"' in text or "\\" in text:
        escaped: list[str] = []
        for char in text:
            if char in '"\\':
                escaped.append("\\" + char)
            elif char.isprintable():
                escaped.append(char)
            else:
                code = ord(char)
                width = 2 if code < 0x100 else 4 if code < 0x10000 else 8
                escaped.append(f"\\{'x' if width == 2 else 'u' if width == 4 else 'U'}{code:0{width}x}")
        text = "".join(escaped)
    return f'"{text}..."' if cut else f'"{text}"'


def vendor_or_class_problem(what: str, value: str) -> str | None:
    """Why ``value`` is not a valid vendor or class (``what`` says which), or None."""
    if not value:
        return f"empty {what}"
    if value[0] in _LETTERS and value[-1] in _ALNUM and _VENDOR_CHARS.issuperset(value):
        return None
    if value[0] not in _LETTERS:
        return f"invalid {what} {quote(value)}: must start with a letter"
    if value[-1] not in _ALNUM:
        return f"invalid {what} {quote(value)}: must end with a letter or digit"
    return f'invalid {what} {quote(value)}: only letters, digits, "_", "." and "-" are allowed'


def device_name_problem(value: str) -> str | None:
    """Why ``value`` is not a valid device name, or None."""
    if not value:
        return "empty device name"
    if value[0] in _ALNUM and value[-1] in _ALNUM and _NAME_CHARS.issuperset(value):
        return None
    if value[0] not in _ALNUM:
        return f"invalid device name {quote(value)}: must start with a letter or digit"
    if value[-1] not in _ALNUM:
        return f"invalid device name {quote(value)}: must end with a letter or digit"
    return f'invalid device name {quote(value)}: only letters, digits, "_", ".", ":" and "-" are allowed'


def split_kind(kind: str) -> tuple[str, str]:
    """``vendor.com/class`` -> (vendor, class), cut at the first ``/``; ("", kind) when there is none."""
    vendor, sep, cls = kind.partition("/")
    if not sep or not vendor or not cls:
        return "", kind
    return vendor, cls


def kind_problem(kind: str, *, spec_limits: bool = False) -> str | None:
    """Why ``kind`` (``vendor/class``) is invalid, or None: the one check of a CDI kind.

    Without ``spec_limits``, the reference library's rules, which every runtime applies when it loads a
    spec or resolves a name: specs and requests are checked by them. ``spec_limits`` adds the CDI
    specification's own, which the library checks neither of (its own tests use
    ``yet_another-vendor2.com``): the vendor a DNS subdomain of at most 253 characters (so no "_"), the
    class at most 63 characters. Those hold for every kind cdictk is asked to write or serve (``cdictk
    cdi generate``, the device plugin) and are what ``cdictk cdi validate`` reports.
    """
    if not isinstance(kind, str):
        return f"{kind!r} is not a string"
    vendor, cls = split_kind(kind)
    if not vendor:
        return f"invalid kind {quote(kind)}: want vendor/class, for example nvidia.com/gpu"
    problem = vendor_or_class_problem("vendor", vendor) or vendor_or_class_problem("class", cls)
    if problem or not spec_limits:
        return problem
    if "_" in vendor:
        return f'invalid vendor {quote(vendor)}: the CDI specification wants a DNS subdomain, without "_"'
    if len(vendor) > _MAX_VENDOR:
        return (
            f"invalid vendor: {len(vendor)} characters, over the CDI specification's limit of {_MAX_VENDOR}"
        )
    if len(cls) > _MAX_CLASS:
        return f"invalid class: {len(cls)} characters, over the CDI specification's limit of {_MAX_CLASS}"
    return None


def qualified_name_problem(text: str) -> str | None:
    """Why ``text`` is not ``vendor/class=name``, or None."""
    qualifier, sep, name = text.partition("=")
    vendor, cls = split_kind(qualifier)
    if not sep or not name or not vendor:
        return "not a qualified CDI device name (want vendor.com/class=name)"
    return (
        vendor_or_class_problem("vendor", vendor)
        or vendor_or_class_problem("class", cls)
        or device_name_problem(name)
    )


def parse_qualified_name(text: str) -> QualifiedName:
    """Parse and check ``vendor/class=name``; ValueError says what is wrong."""
    problem = qualified_name_problem(text)
    if problem is not None:
        if problem.startswith("not a qualified"):
            raise ValueError(f"{quote(text)} is {problem}")
        raise ValueError(f"invalid CDI device name {quote(text)}: {problem}")
    qualifier, _, name = text.partition("=")
    vendor, cls = split_kind(qualifier)
    return QualifiedName(vendor, cls, name)
