"""An image's requirements on the driver and GPUs (``NVIDIA_REQUIRE_*``): which apply, and whether they hold.

The pure half of the check that ``nvidia-container-cli configure --require`` makes before it gives a
container its GPUs; the facts come from :mod:`cdictk.runtime.driverfacts`.

Which requirements apply (NVIDIA: ``internal/config/image/cuda_image.go`` ``GetRequirements``):

- none at all when ``NVIDIA_DISABLE_REQUIRE`` is true by Go's ``strconv.ParseBool`` (``1 t T TRUE true
  True``); any other value, unparsable ones included, leaves the checks on, as NVIDIA's does;
- the value of every variable whose name starts with ``NVIDIA_REQUIRE_``, except those starting with
  ``NVIDIA_REQUIRE_JETPACK`` (Tegra mount options, not requirements), in order of their names;
- for a "legacy image" (``CUDA_VERSION`` set and ``NVIDIA_REQUIRE_CUDA`` unset or empty), also
  ``cuda>=<major>.<minor>`` of ``CUDA_VERSION``.

What a requirement means (libnvidia-container ``src/cli/dsl.c`` and ``src/cli/configure.c``):
space-separated groups are alternatives (any one may hold), comma-separated constraints within a group
must all hold, and every requirement must hold. A constraint is ``<key><operator><value>`` with the
operators ``= != < <= > >=`` and the keys (any case):

- ``cuda``: the CUDA version the driver supports, ``major.minor``;
- ``driver``: the driver version, e.g. ``550.54.15``;
- ``arch``: a GPU's compute capability, ``major.minor``;
- ``brand``: a GPU's brand name (``tesla``, ``nvidia``, ``geforce``, ...), any case, ``=`` and ``!=`` only.

Versions compare number by number, missing numbers counting as 0 (``470 < 470.57.02``, ``12.10 > 12.9``,
``12.0 = 12``). A requirement is checked once per GPU given to the container, with that GPU's ``arch``
and ``brand``, and must hold for every one of them; without a GPU, ``arch`` and ``brand`` constraints
hold.

Stricter than NVIDIA's on purpose, which checks a constraint only when its evaluation reaches it and
reports a malformed one as "invalid expression": every constraint of every applicable requirement is
read up front, and an unknown key, a missing or unknown operator (``==`` and ``!`` included), an empty
key or value, a value that is not a version, an ordering comparison of brands or an empty constraint
(a stray comma) stops the container with one line naming the variable and the constraint. So does a
``CUDA_VERSION`` that is not ``major[.minor[.patch]]``.

Runs on every container start: standard library only, and not even :mod:`typing` or :mod:`re` at import.
"""

from __future__ import annotations

from cdictk.startpath.helpers.errors import HookError

TYPE_CHECKING = False  # typing imports re: keep both out of the container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
JETPACK_PREFIX = "NVIDIA_REQUIRE_JETPACK"
DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
CUDA_VERSION = "CUDA_VERSION"

KEYS = ("cuda", "driver", "arch", "brand")
_VERSION_KEYS = frozenset({"cuda", "driver", "arch"})
_DEVICE_KEYS = frozenset({"arch", "brand"})
_OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
_OPERATOR_CHARS = frozenset("<>=!")
_BRAND_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool
_MAX_SHOWN = 200  # characters of a value repeated in a message
_MAX_DIGITS = 18
# An image sets these: bound the work it can make a root hook do. Real NVIDIA_REQUIRE_CUDA values of
# CUDA 12 images are about 2 KiB with some 30 alternatives.
MAX_REQUIREMENT = 16 << 10
MAX_REQUIREMENTS = 64


class RequirementError(HookError):
    """A requirement that cannot be read, or that the driver or a GPU does not meet: one line."""


class GpuFacts:
    """What a requirement can ask about one GPU given to the container."""

    __slots__ = ("arch", "brand", "minor")

    def __init__(self, arch: str = "", brand: str = "", minor: int | None = None) -> None:
        self.arch = arch  # compute capability, "9.0"
        self.brand = brand  # libnvidia-container's brand name, lower case: "nvidia", "tesla", ...
        self.minor = minor  # /dev/nvidia<minor>, for messages; None when unknown

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GpuFacts):
            return NotImplemented
        return (self.arch, self.brand, self.minor) == (other.arch, other.brand, other.minor)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"GpuFacts(arch={self.arch!r}, brand={self.brand!r}, minor={self.minor!r})"


class Facts:
    """What requirements are checked against: the driver, and the GPUs given to the container.

    Only the facts that :func:`needed_keys` names need to be filled in; the others stay empty.
    """

    __slots__ = ("cuda", "driver", "gpus")

    def __init__(self, cuda: str = "", driver: str = "", gpus: Iterable[GpuFacts] = ()) -> None:
        self.cuda = cuda  # the CUDA version the driver supports, "12.4"
        self.driver = driver  # "550.54.15"
        self.gpus = list(gpus)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Facts):
            return NotImplemented
        return (self.cuda, self.driver, self.gpus) == (other.cuda, other.driver, other.gpus)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Facts(cuda={self.cuda!r}, driver={self.driver!r}, gpus={self.gpus!r})"


class _Constraint:
    __slots__ = ("key", "operator", "text", "value", "version")

    def __init__(self, key: str, operator: str, value: str, text: str) -> None:
        self.key = key  # lower case
        self.operator = operator
        self.value = value
        self.version = _version(value) if key in _VERSION_KEYS else None
        self.text = text  # as written


def requirements(env: Mapping[str, str]) -> list[str]:
    """The requirements that apply to a container with the process environment ``env``, each read.

    Empty values (which require nothing) are left out; ``[]`` when nothing is required. Raises
    :class:`RequirementError` naming the variable for one that cannot be read.
    """
    if env.get(DISABLE_REQUIRE, "") in _TRUE:
        return []
    found: list[str] = []
    names = [name for name in env if name.startswith(REQUIRE_PREFIX) and not name.startswith(JETPACK_PREFIX)]
    if len(names) > MAX_REQUIREMENTS:
        raise RequirementError(f"more than {MAX_REQUIREMENTS} {REQUIRE_PREFIX}* variables")
    for name in sorted(names):
        value = env[name]
        if len(value) > MAX_REQUIREMENT:
            raise RequirementError(f"{name}: longer than {MAX_REQUIREMENT} characters")
        if _parse(value, name):
            found.append(value)
    legacy = env.get(CUDA_VERSION, "")
    if legacy and not env.get(REQUIRE_CUDA, ""):
        found.append(f"cuda>={_major_minor(legacy)}")
    return found


def needed_keys(reqs: Iterable[str]) -> set[str]:
    """Which of ``cuda``, ``driver``, ``arch`` and ``brand`` the requirements ask about."""
    return {c.key for req in reqs for group in _parse(req, None) for c in group}


def check(reqs: Sequence[str], facts: Facts) -> None:
    """Raise :class:`RequirementError` for the first requirement that ``facts`` do not meet.

    Each requirement must hold for every GPU in ``facts.gpus``, taken one at a time as
    libnvidia-container does (once, without a GPU, when there is none). A fact the requirements ask
    about that was not filled in is an error too, never taken as met.
    """
    devices: list[GpuFacts | None] = list(facts.gpus) or [None]
    for req in reqs:
        groups = _parse(req, None)
        if not groups:
            continue
        for gpu in devices:
            failures: list[_Constraint] = []
            for group in groups:
                failed = _first_unmet(group, facts, gpu)
                if failed is None:
                    break
                failures.append(failed)
            else:
                raise RequirementError(_unmet(groups, failures, facts, gpu))


# ---- parsing ----------------------------------------------------------------------------------------


def _parse(req: str, name: str | None) -> list[list[_Constraint]]:
    """The groups (alternatives) of ``req``, each a list of constraints; [] for an empty requirement."""
    groups: list[list[_Constraint]] = []
    for term in req.split(" "):
        if term == "":
            continue  # separators may repeat, as for NVIDIA
        groups.append([_constraint(factor, term, req, name) for factor in term.split(",")])
    return groups


def _constraint(text: str, term: str, req: str, name: str | None) -> _Constraint:
    def bad(problem: str, shown: str = text) -> RequirementError:
        where = name if name is not None else f"requirement {_quote(req)}"
        return RequirementError(f"{where}: bad constraint {_quote(shown)}: {problem}")

    if text == "":
        raise bad("empty constraint (a stray comma)", term)
    start = 0
    while start < len(text) and text[start] not in _OPERATOR_CHARS:
        start += 1
    if start == len(text):
        raise bad("no operator (want one of = != < <= > >=)")
    key = text[:start]
    if key == "":
        raise bad("no key before the operator")
    end = start
    while end < len(text) and text[end] in _OPERATOR_CHARS:
        end += 1
    operator, value = text[start:end], text[end:]
    lowered = key.lower()
    if lowered not in KEYS:
        raise bad(f"unknown key {_quote(key)} (want cuda, driver, arch or brand)")
    if operator not in _OPERATORS:
        raise bad(f"unknown operator {_quote(operator)} (want one of = != < <= > >=)")
    if value == "":
        raise bad("no value after the operator")
    constraint = _Constraint(lowered, operator, value, text)
    if lowered in _VERSION_KEYS:
        if constraint.version is None:
            raise bad(f"{_quote(value)} is not a version (want numbers separated by dots)")
    else:
        if operator not in ("=", "!="):
            raise bad("a brand can only be compared with = or !=")
        if not set(value) <= _BRAND_CHARS:
            raise bad(f"{_quote(value)} is not a brand name (want letters and digits)")
    return constraint


def _version(text: str) -> tuple[int, ...] | None:
    """``"470.57.02"`` as (470, 57, 2) without trailing zeros, so that tuples compare as NVIDIA does."""
    numbers: list[int] = []
    for part in text.split("."):
        if not _is_number(part):
            return None
        numbers.append(int(part))
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def _is_number(text: str) -> bool:
    """ASCII digits, at most 18 of them (NVIDIA's numbers are 64-bit; Python's int() refuses 4300)."""
    return 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()


def _major_minor(version: str) -> str:
    """``CUDA_VERSION`` (``10.0.130``) as the ``major.minor`` a legacy image requires (``10.0``)."""
    parts = version.split(".")
    if len(parts) > 3 or not all(_is_number(part) for part in parts):
        raise RequirementError(
            f"{CUDA_VERSION}: {_quote(version)} is not a version (want major[.minor[.patch]])"
        )
    minor = int(parts[1]) if len(parts) > 1 else 0
    return f"{int(parts[0])}.{minor}"


# ---- evaluation -------------------------------------------------------------------------------------


def _first_unmet(group: list[_Constraint], facts: Facts, gpu: GpuFacts | None) -> _Constraint | None:
    for constraint in group:
        if not _holds(constraint, facts, gpu):
            return constraint
    return None


def _holds(constraint: _Constraint, facts: Facts, gpu: GpuFacts | None) -> bool:
    key = constraint.key
    if key in _DEVICE_KEYS and gpu is None:
        return True  # no GPU given: nothing to hold against, as for NVIDIA
    actual = _actual(key, facts, gpu)
    if key == "brand":
        equal = actual.lower() == constraint.value.lower()
        return equal if constraint.operator == "=" else not equal
    have = _version(actual)
    if have is None:
        raise RequirementError(
            f"cannot check {constraint.text}: {_subject(key, gpu)} {_quote(actual)} is not a version"
        )
    want = constraint.version
    assert want is not None  # noqa: S101 - _constraint made sure
    operator = constraint.operator
    if operator == "=":
        return have == want
    if operator == "!=":
        return have != want
    if operator == "<":
        return have < want
    if operator == "<=":
        return have <= want
    if operator == ">":
        return have > want
    return have >= want


def _actual(key: str, facts: Facts, gpu: GpuFacts | None) -> str:
    if key == "cuda":
        value = facts.cuda
    elif key == "driver":
        value = facts.driver
    else:
        assert gpu is not None  # noqa: S101 - _holds made sure
        value = gpu.arch if key == "arch" else gpu.brand
    if value == "":
        raise RequirementError(f"cannot check {key}: {_subject(key, gpu)} is not known")
    return value


def _known(key: str, facts: Facts, gpu: GpuFacts | None) -> bool:
    if key in _DEVICE_KEYS:
        return gpu is not None and (gpu.arch if key == "arch" else gpu.brand) != ""
    return (facts.cuda if key == "cuda" else facts.driver) != ""


def _subject(key: str, gpu: GpuFacts | None) -> str:
    device = "the GPU" if gpu is None or gpu.minor is None else f"/dev/nvidia{gpu.minor}"
    return {
        "cuda": "the CUDA version of the driver",
        "driver": "the driver version",
        "arch": f"the compute capability of {device}",
        "brand": f"the brand of {device}",
    }[key]


def _describe(key: str, facts: Facts, gpu: GpuFacts | None) -> str:
    """The fact behind ``key``, in words: "the driver supports CUDA 12.4"."""
    value = _show(_actual(key, facts, gpu))
    if key == "cuda":
        return f"the driver supports CUDA {value}"
    if key == "driver":
        return f"the driver is {value}"
    return f"{_subject(key, gpu)} is {value}"


def _unmet(
    groups: list[list[_Constraint]], failures: list[_Constraint], facts: Facts, gpu: GpuFacts | None
) -> str:
    first, failed = groups[0], failures[0]
    text = _shorten(",".join(c.text for c in first))
    message = f"requirement not met: {text} ({_describe(failed.key, facts, gpu)})"
    if len(groups) > 1:
        others = sorted({c.key for group in groups[1:] for c in group} - {failed.key}, key=KEYS.index)
        facts_text = "; ".join(_describe(key, facts, gpu) for key in others if _known(key, facts, gpu))
        count = len(groups) - 1
        message += f", nor any of its {count} other alternative{'s' if count > 1 else ''}"
        if facts_text:
            message += f" ({facts_text})"
    if failed.key == "cuda" and failed.operator in (">", ">="):
        message += ": update the driver, or use an image built for an older CUDA"
    return message


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."


def _show(value: str) -> str:
    """A fact as it is when it reads well on one line, else quoted."""
    if value.isprintable() and " " not in value and '"' not in value and len(value) <= _MAX_SHOWN:
        return value
    return _quote(value)


def _quote(text: str) -> str:
    """``text`` in double quotes, on one line: control characters escaped, long values cut."""
    cut = len(text) > _MAX_SHOWN
    if cut:
        text = text[:_MAX_SHOWN]
    if not text.isprintable() or '"' in text or "\\" in text:
        text = "".join(
            "\\" + char
            if char in '"\\'
            else char
            if char.isprintable()
            else f"\\x{ord(char):02x}"
            if ord(char) < 0x100
            else f"\\u{ord(char):04x}"
            if ord(char) < 0x10000
            else f"\\U{ord(char):08x}"
            for char in text
        )
    return f'"{text}..."' if cut else f'"{text}"'
