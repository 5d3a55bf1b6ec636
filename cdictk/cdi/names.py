"""CDI names: vendor, class and device-name syntax, and fully qualified ``vendor.com/class=name``.

The syntax is the reference library's: letters first for vendor and class, no length limits, a colon
allowed inside device names. :func:`kind_spec_problem` adds the CDI specification's stricter rules for
``kind``, which only ``cdictk cdi validate`` applies. Standard library only (the runtime shim parses
requests with it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VENDOR_OR_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_MAX_VENDOR = 253  # a DNS subdomain's limit
_MAX_CLASS = 63


@dataclass(frozen=True, slots=True)
class QualifiedName:
    vendor: str
    cls: str
    name: str

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.cls}"

    def __str__(self) -> str:
        return f"{self.vendor}/{self.cls}={self.name}"


def vendor_or_class_problem(what: str, value: str) -> str | None:
    """Why ``value`` is not a valid vendor or class (``what`` says which), or None."""
    if not value:
        return f"empty {what}"
    if _VENDOR_OR_CLASS.fullmatch(value):
        return None
    if not value[0].isascii() or not value[0].isalpha():
        return f'invalid {what} "{value}": must start with a letter'
    if not value[-1].isascii() or not value[-1].isalnum():
        return f'invalid {what} "{value}": must end with a letter or digit'
    return f'invalid {what} "{value}": only letters, digits, "_", "." and "-" are allowed'


def device_name_problem(value: str) -> str | None:
    """Why ``value`` is not a valid device name, or None."""
    if not value:
        return "empty device name"
    if _DEVICE_NAME.fullmatch(value):
        return None
    if not value[0].isascii() or not value[0].isalnum():
        return f'invalid device name "{value}": must start with a letter or digit'
    if not value[-1].isascii() or not value[-1].isalnum():
        return f'invalid device name "{value}": must end with a letter or digit'
    return f'invalid device name "{value}": only letters, digits, "_", ".", ":" and "-" are allowed'


def split_kind(kind: str) -> tuple[str, str]:
    """``vendor.com/class`` -> (vendor, class), cut at the first ``/``; ("", kind) when there is none."""
    vendor, sep, cls = kind.partition("/")
    if not sep or not vendor or not cls:
        return "", kind
    return vendor, cls


def kind_problem(kind: str) -> str | None:
    """Why ``kind`` (``vendor/class``) is invalid, or None."""
    vendor, cls = split_kind(kind)
    if not vendor:
        return f'invalid kind "{kind}": want vendor/class, for example nvidia.com/gpu'
    return vendor_or_class_problem("vendor", vendor) or vendor_or_class_problem("class", cls)


def kind_spec_problem(kind: str) -> str | None:
    """Why a ``kind`` that :func:`kind_problem` accepts still breaks the CDI specification, or None.

    The specification wants the vendor a DNS subdomain of at most 253 characters and the class at most
    63 characters. The reference library checks neither (its own tests use ``yet_another-vendor2.com``),
    so runtimes use such specs and loading must accept them; only validation reports them.
    """
    vendor, cls = split_kind(kind)
    if "_" in vendor:
        return f'invalid vendor "{vendor}": the CDI specification wants a DNS subdomain, without "_"'
    if len(vendor) > _MAX_VENDOR:
        return (
            f"invalid vendor: {len(vendor)} characters, over the CDI specification's limit of {_MAX_VENDOR}"
        )
    if len(cls) > _MAX_CLASS:
        return f"invalid class: {len(cls)} characters, over the CDI specification's limit of {_MAX_CLASS}"
    return None


def parse_qualified_name(text: str) -> QualifiedName:
    """Parse and check ``vendor/class=name``; ValueError says what is wrong."""
    qualifier, sep, name = text.partition("=")
    vendor, cls = split_kind(qualifier)
    if not sep or not name or not vendor:
        raise ValueError(f'"{text}" is not a qualified CDI device name (want vendor.com/class=name)')
    problem = (
        vendor_or_class_problem("vendor", vendor)
        or vendor_or_class_problem("class", cls)
        or device_name_problem(name)
    )
    if problem:
        raise ValueError(f'invalid CDI device name "{text}": {problem}')
    return QualifiedName(vendor, cls, name)
