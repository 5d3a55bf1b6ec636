"""``@record``: dataclasses' declarations and behaviour, without their cost at start.

The dataclasses module costs ``cdictk cdi generate`` about 13 ms to import (it imports inspect, ast,
dis, re, ...) and half a millisecond per class, compiling each class's ``__init__``, ``__repr__``,
``__eq__`` and ``__hash__`` from source text with ``exec``: some 28 ms for the records a generate
loads, on a 2-core machine where NVIDIA's whole generator takes 16 ms. A record is declared the same
way (annotations, defaults, ``field(default_factory=...)``) and behaves the same for what cdictk
uses: slots, keyword or positional construction, ``repr``, ``==``, ``hash`` and read-only attributes
when frozen, :func:`replace`, :func:`asdict`, copy and deepcopy. Its methods are closures over the
field names, made without compiling anything. Type checkers see it as a dataclass
(``dataclass_transform``).
"""

from __future__ import annotations

from operator import attrgetter

TYPE_CHECKING = False  # typing imports re: keep both off the start of every command
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")
else:

    def dataclass_transform(**_options: object) -> Callable[[T], T]:
        return lambda decorated: decorated


class FrozenError(AttributeError):
    """An attribute of a frozen record was set or deleted."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], object]) -> None:
        self.make = make


_MISSING = object()


def field(*, default_factory: Callable[[], T]) -> T:
    """A field whose default is made per instance (a list, a dict), as dataclasses.field's."""
    return _Factory(default_factory)  # type: ignore[return-value]


@dataclass_transform(field_specifiers=(field,))
def record(cls: type[T] | None = None, /, *, frozen: bool = False, eq: bool = True) -> Any:
    """Make ``cls`` a record (``@record`` or ``@record(frozen=True)``): its annotated attributes, in
    order, are its fields; those after the first with a default need one too. ``eq=False``: records
    compare and hash by identity."""
    if cls is None:
        return lambda undecorated: _make(undecorated, frozen, eq)
    return _make(cls, frozen, eq)


def _make(cls: type[T], frozen: bool, eq: bool) -> type[T]:
    inherited: tuple[str, ...] = getattr(cls, "__record_fields__", ())
    own = [
        name
        for name in cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect costs ms to import
        if name not in inherited
    ]
    names = (*inherited, *own)
    defaults: dict[str, object] = dict(getattr(cls, "__record_defaults__", {}))
    namespace = {key: value for key, value in cls.__dict__.items() if key not in ("__dict__", "__weakref__")}
    for name in own:
        if name in namespace:
            defaults[name] = namespace.pop(name)
        elif defaults:
            raise TypeError(
                f"{cls.__qualname__}: field {name!r} without a default follows one with a default"
            )
    namespace.update(
        __slots__=tuple(own),
        __record_fields__=names,
        __record_defaults__=defaults,
        __match_args__=names,
        __init__=_init(cls.__qualname__, names, defaults, frozen),
        __repr__=_repr(names),
    )
    if eq:
        namespace.update(__eq__=_eq(names), __hash__=_hash(names) if frozen else None)
    if frozen:
        namespace.update(
            __setattr__=_refuse, __delattr__=_refuse, __getstate__=_getstate, __setstate__=_setstate
        )
    made: type[T] = type(cls.__name__, cls.__bases__, namespace)
    made.__qualname__ = cls.__qualname__
    return made


def _init(
    qualname: str, names: tuple[str, ...], defaults: dict[str, object], frozen: bool
) -> Callable[..., None]:
    count = len(names)
    assign = object.__setattr__ if frozen else setattr

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        if len(args) > count:
            raise TypeError(f"{qualname}() takes {count} positional arguments but {len(args)} were given")
        for name, value in zip(names, args, strict=False):
            assign(self, name, value)
        for name in names[len(args) :]:
            value = kwargs.pop(name, _MISSING)
            if value is _MISSING:
                value = defaults.get(name, _MISSING)
                if value is _MISSING:
                    raise TypeError(f"{qualname}() missing required argument: {name!r}")
                if isinstance(value, _Factory):
                    value = value.make()
            assign(self, name, value)
        if kwargs:
            name = next(iter(kwargs))
            how = (
                "got multiple values for argument" if name in names else "got an unexpected keyword argument"
            )
            raise TypeError(f"{qualname}() {how} {name!r}")

    return __init__


def _values(names: tuple[str, ...]) -> Callable[[object], tuple[object, ...]]:
    if len(names) == 1:  # attrgetter of one name returns the value, not a tuple
        single = attrgetter(names[0])
        return lambda obj: (single(obj),)
    if not names:
        return lambda obj: ()
    return attrgetter(*names)


def _repr(names: tuple[str, ...]) -> Callable[[object], str]:
    values = _values(names)

    def __repr__(self: object) -> str:
        pairs = ", ".join(f"{name}={value!r}" for name, value in zip(names, values(self), strict=True))
        return f"{type(self).__qualname__}({pairs})"

    return __repr__


def _eq(names: tuple[str, ...]) -> Callable[[object, object], bool]:
    values = _values(names)

    def __eq__(self: object, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return values(self) == values(other)

    return __eq__


def _hash(names: tuple[str, ...]) -> Callable[[object], int]:
    values = _values(names)
    return lambda self: hash(values(self))


def _refuse(self: object, name: str, *_value: object) -> None:
    raise FrozenError(f"cannot assign to field {name!r}: {type(self).__qualname__} is frozen")


def _getstate(self: object) -> tuple[object, ...]:
    return tuple(getattr(self, name) for name in type(self).__record_fields__)  # type: ignore[attr-defined]


def _setstate(self: object, state: tuple[object, ...]) -> None:
    for name, value in zip(type(self).__record_fields__, state, strict=True):  # type: ignore[attr-defined]
        object.__setattr__(self, name, value)


def is_record(obj: object) -> bool:
    return hasattr(type(obj), "__record_fields__")


def fields(obj: object) -> tuple[str, ...]:
    """The field names of a record or record class, in order."""
    names: tuple[str, ...] = getattr(obj, "__record_fields__")  # noqa: B009 - not an attribute of object
    return names


def replace(obj: T, /, **changes: object) -> T:
    """A copy of the record ``obj`` with ``changes``, as dataclasses.replace."""
    values = {name: getattr(obj, name) for name in fields(obj)}
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {sorted(unknown)[0]!r}")
    return type(obj)(**{**values, **changes})


def asdict(obj: object) -> dict[str, Any]:
    """A record as plain dicts, lists and tuples, recursively, as dataclasses.asdict."""
    return {name: _plain(getattr(obj, name)) for name in fields(obj)}


def _plain(value: object) -> object:
    if is_record(value):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    return value
