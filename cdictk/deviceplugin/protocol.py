"""Our .proto files, compiled once into descriptor sets, and typed messages on both sides of the wire.

Why no generated ``_pb2`` modules: code that protoc generates checks, at import, that the protobuf
runtime is at least the version that generated it, so committed code pins every user to a protobuf
at least as new as the developer's; and it is untyped. A ``FileDescriptorSet`` (``*.binpb``, what
``protoc --descriptor_set_out`` writes) is plain protobuf data that every protobuf 4 and later reads;
the message classes are made from it at run time. The program's side of every message is a frozen
dataclass named as the message, with the proto's field names: :class:`Codec` turns one into bytes and
back, field by field, so mypy checks every use and an unknown or misspelt field fails in tests.

``python -m cdictk.deviceplugin.protocol --compile PROTO`` writes ``PROTO`` minus ``.proto`` plus
``.binpb`` (needs grpcio-tools, a dev tool); the unit tests compile every .proto again and compare.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

T = TypeVar("T")


def compile_proto(proto: str) -> bytes:
    """The FileDescriptorSet of ``proto`` (no imports, no source info), as protoc writes it."""
    import tempfile  # noqa: PLC0415 - only the compile step needs these

    from grpc_tools import protoc  # type: ignore[import-untyped]  # noqa: PLC0415 - a developer's tool

    directory, name = os.path.split(os.path.abspath(proto))
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "set.binpb")
        status = protoc.main(["protoc", f"--proto_path={directory}", f"--descriptor_set_out={out}", name])
        if status != 0:
            raise RuntimeError(f"protoc failed on {proto} (status {status})")
        with open(out, "rb") as compiled:
            return compiled.read()


def binpb_path(proto: str) -> str:
    return proto.removesuffix(".proto") + ".binpb"


class Schema:
    """The messages of one compiled .proto file, in a descriptor pool of their own (never the
    process-wide default pool, where another library's ``v1beta1.Device`` could clash)."""

    def __init__(self, binpb: str) -> None:
        with open(binpb, "rb") as source:
            files = descriptor_pb2.FileDescriptorSet.FromString(source.read())
        self.pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            self.pool.Add(file)
        self.package = files.file[0].package

    def descriptor(self, name: str) -> Descriptor:
        return self.pool.FindMessageTypeByName(f"{self.package}.{name}")

    def message_class(self, name: str) -> type[Message]:
        return message_factory.GetMessageClass(self.descriptor(name))

    def method_path(self, service: str, method: str) -> str:
        """The gRPC path of a method, ``/<package>.<Service>/<Method>``; KeyError for an unknown one."""
        found = self.pool.FindServiceByName(f"{self.package}.{service}").FindMethodByName(method)
        if found is None:
            raise KeyError(f"{service}.{method}")
        return f"/{self.package}.{service}/{method}"


class Codec:
    """Frozen dataclasses to and from the wire, by a :class:`Schema`: a dataclass's name is its
    message's, its fields the message's fields (``list[...]`` for repeated, ``dict[str, str]`` for a
    map, another dataclass or ``None`` for a message, an int for an enum)."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._classes: dict[str, type[Message]] = {}
        self._layouts: dict[type, tuple[_Field, ...]] = {}

    def encode(self, value: object) -> bytes:
        return self.to_message(value).SerializeToString()

    def decode(self, kind: type[T], data: bytes) -> T:
        message = self._class(kind.__name__)()
        message.ParseFromString(data)
        return self.from_message(kind, message)

    def serializer(self) -> Callable[[Any], bytes]:
        return self.encode

    def deserializer(self, kind: type[T]) -> Callable[[bytes], T]:
        return lambda data: self.decode(kind, data)

    def _class(self, name: str) -> type[Message]:
        found = self._classes.get(name)
        if found is None:
            found = self._classes[name] = self.schema.message_class(name)
        return found

    def to_message(self, value: object) -> Message:
        message = self._class(type(value).__name__)()
        self._fill(message, value)
        return message

    def _fill(self, message: Any, value: object) -> None:
        for field in self._layout(type(value)):
            item = getattr(value, field.name)
            if field.shape is _Shape.MAP:
                getattr(message, field.name).update(item)
            elif field.shape is _Shape.MESSAGES:
                target = getattr(message, field.name)
                for element in item:
                    self._fill(target.add(), element)
            elif field.shape is _Shape.SCALARS:
                getattr(message, field.name).extend(item)
            elif field.shape is _Shape.MESSAGE:
                if item is not None:
                    self._fill(getattr(message, field.name), item)
            else:
                setattr(message, field.name, item)

    def from_message(self, kind: type[T], message: Any) -> T:
        values: dict[str, object] = {}
        for field in self._layout(kind):
            item = getattr(message, field.name)
            if field.shape is _Shape.MAP:
                values[field.name] = dict(item)
            elif field.shape is _Shape.MESSAGES:
                values[field.name] = [self.from_message(field.nested, part) for part in item]
            elif field.shape is _Shape.SCALARS:
                values[field.name] = list(item)
            elif field.shape is _Shape.MESSAGE:
                has = message.HasField(field.name)
                values[field.name] = self.from_message(field.nested, item) if has else None
            else:
                values[field.name] = item
        return kind(**values)

    def _layout(self, kind: type) -> tuple[_Field, ...]:
        """Each field of the dataclass ``kind`` with its shape on the wire and, for a message, its
        dataclass: worked out once per class (type hints are costly to resolve at every call)."""
        found = self._layouts.get(kind)
        if found is None:
            found = self._layouts[kind] = self._work_out(kind)
        return found

    def _work_out(self, kind: type) -> tuple[_Field, ...]:
        descriptor = self.schema.descriptor(kind.__name__)
        hints = typing.get_type_hints(kind)
        fields = []
        for field in dataclasses.fields(kind):
            proto = descriptor.fields_by_name.get(field.name)
            if proto is None:
                raise TypeError(f"{descriptor.full_name} has no field {field.name!r}")
            message = proto.type == FieldDescriptor.TYPE_MESSAGE
            if _is_map(proto):
                fields.append(_Field(field.name, _Shape.MAP))
            elif _is_repeated(proto):
                element = typing.get_args(hints[field.name])[0]
                fields.append(_Field(field.name, _Shape.MESSAGES if message else _Shape.SCALARS, element))
            elif message:
                fields.append(_Field(field.name, _Shape.MESSAGE, _optional_of(hints[field.name])))
            else:
                fields.append(_Field(field.name, _Shape.SCALAR))
        return tuple(fields)


class _Shape(enum.Enum):
    MAP = "map"
    MESSAGES = "repeated message"
    SCALARS = "repeated scalar"
    MESSAGE = "message"
    SCALAR = "scalar"


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    shape: _Shape
    nested: Any = None  # a message field's dataclass (an element's, for a repeated one)


def _is_map(field: FieldDescriptor) -> bool:
    message = field.message_type
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE and message is not None and message.GetOptions().map_entry
    )


def _is_repeated(field: FieldDescriptor) -> bool:
    # FieldDescriptor.label is deprecated in newer protobufs; is_repeated is missing in older ones.
    repeated = getattr(field, "is_repeated", None)
    if isinstance(repeated, bool):
        return repeated
    return bool(getattr(field, "label", None) == FieldDescriptor.LABEL_REPEATED)


def _optional_of(hint: Any) -> Any:
    """``X`` from ``X | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        others = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(others) == 1:
            return others[0]
    return hint


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--compile":
        print("usage: python -m cdictk.deviceplugin.protocol --compile PROTO...", file=sys.stderr)
        return 2
    for proto in argv[1:]:
        with open(binpb_path(proto), "wb") as out:
            out.write(compile_proto(proto))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
