"""Protobuf payloads through the protobuf runtime, with descriptors built from the registry's
schema. The registry serves a schema as ``.proto`` text (Confluent, Apicurio) or, asked with
``format=serialized`` or when a Python serializer registered it, as a base64
``FileDescriptorProto``. Text is compiled by protoc itself, in-process, from grpcio-tools: the
protobuf package has no ``.proto`` parser, and the small pure-Python parsers give an AST that
would still need a hand-written conversion to descriptors.
"""

from __future__ import annotations

import base64
import binascii
import os
import tempfile
from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.formats import RegistrySchema, invalid_schema, undecodable
from embedstream.wire.registry_frames import parse_message_indexes

# The file name the schema's own text gets when compiled; references keep theirs (their
# names are the import paths the schema uses).
_MAIN_FILE = "embedstream_registry_schema.proto"


class ProtobufDecoder:
    def __init__(self, schema: RegistrySchema) -> None:
        self._schema_id = schema.schema_id
        try:
            files, main = _file_descriptors(schema)
            # A pool per schema id: versions of one schema define the same full names.
            self._pool = descriptor_pool.DescriptorPool()
            for file in files:
                self._pool.Add(file)
        except (TypeError, ValueError, KeyError) as exc:
            raise invalid_schema(schema, exc) from None
        self._main = main
        self._classes: dict[tuple[int, ...], type[Message]] = {}

    def decode(self, payload: bytes) -> dict[str, Any]:
        indexes, body = parse_message_indexes(payload)
        cls = self._classes.get(indexes)
        if cls is None:
            cls = self._classes[indexes] = self._message_class(indexes)
        try:
            message = cls.FromString(body)
        except DecodeError as exc:
            raise undecodable(self._schema_id, exc) from None
        # Field names as in the .proto; int64 become strings, bytes base64, enums their names:
        # the protobuf JSON mapping, so what follows sees JSON values.
        doc: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
        return doc

    def _message_class(self, indexes: tuple[int, ...]) -> type[Message]:
        """The message type at a message-index path: top-level message, then nested ones."""
        types = self._main.message_type
        names = [self._main.package] if self._main.package else []
        for index in indexes:
            if index >= len(types):
                raise InvalidEvent(
                    Reason.INVALID_MESSAGE_INDEXES,
                    f"schema {self._schema_id} has no message at index path {list(indexes)}",
                )
            names.append(types[index].name)
            types = types[index].nested_type
        descriptor = self._pool.FindMessageTypeByName(".".join(names))
        cls: type[Message] = message_factory.GetMessageClass(descriptor)
        return cls


def _file_descriptors(
    schema: RegistrySchema,
) -> tuple[list[descriptor_pb2.FileDescriptorProto], descriptor_pb2.FileDescriptorProto]:
    """Every file the schema needs, dependencies first, and the schema's own file."""
    main = _serialized(schema.schema)
    if main is not None:
        references = [_serialized(reference.schema) for reference in schema.references]
        if any(reference is None for reference in references):
            raise ValueError("a base64 descriptor schema with .proto text references")
        return [file for file in references if file is not None] + [main], main
    sources = {reference.name: reference.schema for reference in schema.references}
    sources[_MAIN_FILE] = schema.schema
    files = compile_proto(sources, _MAIN_FILE)
    return files, files[-1]


def _serialized(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto of a base64 schema, or None when the text is .proto source."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None  # .proto text has spaces and semicolons: never valid base64
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(data)
    except DecodeError as exc:
        raise ValueError(f"base64 schema is not a FileDescriptorProto: {exc}") from None


def compile_proto(sources: dict[str, str], main: str) -> list[descriptor_pb2.FileDescriptorProto]:
    """Compile ``.proto`` sources (name -> text) with protoc; the descriptors of ``main`` and
    everything it imports, dependencies first. Google's well-known types are on the path."""
    from grpc_tools import protoc  # protoc in-process; only imported for .proto text

    well_known = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="embedstream-proto-") as folder:
        for name, text in sources.items():
            path = os.path.join(folder, name)
            if os.path.commonpath([folder, os.path.realpath(path)]) != folder:
                raise ValueError(f"reference name {name!r} leaves the source folder")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as file:
                file.write(text)
        out = os.path.join(folder, "descriptors.pb")
        status = protoc.main(
            [
                "protoc",
                f"--proto_path={folder}",
                f"--proto_path={well_known}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                os.path.join(folder, main),
            ]
        )
        if status != 0:
            # protoc writes its diagnostics to the process's stderr, not to us.
            raise ValueError(f"protoc rejected the schema (exit {status}, message on stderr)")
        with open(out, "rb") as file:
            descriptors = descriptor_pb2.FileDescriptorSet.FromString(file.read())
    return list(descriptors.file)
