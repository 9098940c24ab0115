"""A manifest's file row, held in about half the memory of a plain record: a worker caches one
per file of every skill it sees (docs/benchmarks.md, "Manifests in memory").

`FileEntry.sha256` is a lowercase hex string to every caller, but a canonical digest (64
lowercase hex characters) is held as an int together with the size, `size << 256 | digest`:
one 60-byte object where the string (113 B) and the size (28 B) took two. Any other value is
kept as given, so it round-trips exactly. Pydantic validates and serializes a `FileEntry`
as it did the dataclass it was (the same fields, errors and JSON, byte for byte)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import ArgsKwargs, CoreSchema, SchemaSerializer, SchemaValidator, core_schema

_DIGEST = (1 << 256) - 1

#: The modes files have (0o644, 0o755, …), one int object each however many entries use it.
_MODES: dict[int, int] = {}

#: The last file time parsed: the files of one publish share a time, and so one float object.
_last_time = [0.0]


class FileEntry:
    """One row of a manifest's file table."""

    __slots__ = ("_key", "mode", "mtime")
    _key: int | tuple[str, int]
    mode: int
    mtime: float

    if TYPE_CHECKING:

        def __init__(self, *, sha256: str, size: int, mode: int, mtime: float) -> None: ...

    else:

        def __new__(cls, *args: Any, **kwargs: Any) -> FileEntry:
            """Validated as the dataclass it was: the same coercions and errors."""
            return _from_args(_ARGS.validate_python(ArgsKwargs(args, kwargs)), cls)

    @property
    def sha256(self) -> str:
        key = self._key
        return (key & _DIGEST).to_bytes(32).hex() if isinstance(key, int) else key[0]

    @property
    def size(self) -> int:
        key = self._key
        return key >> 256 if isinstance(key, int) else key[1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileEntry) or other.__class__ is not self.__class__:
            return NotImplemented
        return (self._key, self.mode, self.mtime) == (other._key, other.mode, other.mtime)

    def __hash__(self) -> int:
        return hash((self._key, self.mode, self.mtime))

    def __repr__(self) -> str:
        return (
            f"{type(self).__qualname__}(sha256={self.sha256!r}, size={self.size!r}, "
            f"mode={self.mode!r}, mtime={self.mtime!r})"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return _restore, (self._key, self.mode, self.mtime)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return _SCHEMA

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The JSON schema the dataclass had: an object of the four fields, titled."""
        return {"description": cls.__doc__, **handler(schema), "title": cls.__name__}

    # the pydantic calls the edges make, under `BaseModel`'s names (as the other records)

    @classmethod
    def model_validate_json(cls, raw: bytes | str) -> FileEntry:
        result: FileEntry = _VALIDATOR.validate_json(raw)
        return result

    @classmethod
    def model_validate(cls, data: Any) -> FileEntry:
        result: FileEntry = _VALIDATOR.validate_python(data)
        return result

    def model_dump_json(self) -> str:
        return _SERIALIZER.to_json(self).decode()

    def model_dump(self, *, mode: Literal["json", "python"] = "python") -> dict[str, Any]:
        result: dict[str, Any] = _SERIALIZER.to_python(self, mode=mode)
        return result

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Self:
        """A copy with `update`'s fields changed (validated, unlike `BaseModel.model_copy`)."""
        return type(self)(**{**_fields(self), **(update or {})})


def _restore(key: int | tuple[str, int], mode: int, mtime: float) -> FileEntry:
    """An unpickled entry (its state as held, already validated)."""
    entry = _new(FileEntry)
    _set_key(entry, key)
    _set_mode(entry, mode)
    _set_mtime(entry, mtime)
    return entry


def _from_args(args: tuple[dict[str, Any], Any], cls: type[FileEntry] = FileEntry) -> FileEntry:
    """An entry of the validated fields: its digest and size packed when the digest is
    canonical (`fromhex` also reads blanks and uppercase, which the round trip refuses; a
    negative size packs too, the shift keeps its sign), its mode and time shared. Once per
    file of every manifest parsed, so written out in one function."""
    fields = args[0]
    sha256, size, mode, mtime = fields["sha256"], fields["size"], fields["mode"], fields["mtime"]
    entry = _new(cls)
    try:
        raw = bytes.fromhex(sha256) if len(sha256) == 64 else b""
    except ValueError:
        raw = b""
    if raw and raw.hex() == sha256:
        _set_key(entry, size << 256 | int.from_bytes(raw))
    else:
        _set_key(entry, (sha256, size))
    shared = _MODES.get(mode)
    if shared is None and len(_MODES) < 64:
        shared = _MODES.setdefault(mode, mode)
    _set_mode(entry, mode if shared is None else shared)
    if mtime == _last_time[0]:
        mtime = _last_time[0]
    else:
        _last_time[0] = mtime
    _set_mtime(entry, mtime)
    return entry


def _instance_or_row(value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
    """Python input: an entry is taken as it is (the dataclass did not revalidate one)."""
    return value if isinstance(value, FileEntry) else handler(value)


def _fields(entry: FileEntry) -> dict[str, Any]:
    """The dataclass's fields, in its order (what the stored JSON holds)."""
    key = entry._key
    if isinstance(key, int):
        sha256, size = (key & _DIGEST).to_bytes(32).hex(), key >> 256
    else:
        sha256, size = key
    return {"sha256": sha256, "size": size, "mode": entry.mode, "mtime": entry.mtime}


#: The dataclass's own argument schema: a dict (or keyword arguments) of the four fields.
_ARGS_SCHEMA = core_schema.dataclass_args_schema(
    "FileEntry",
    [
        core_schema.dataclass_field("sha256", core_schema.str_schema()),
        core_schema.dataclass_field("size", core_schema.int_schema()),
        core_schema.dataclass_field("mode", core_schema.int_schema()),
        core_schema.dataclass_field("mtime", core_schema.float_schema()),
    ],
)
_ROW = core_schema.no_info_after_validator_function(_from_args, _ARGS_SCHEMA)
_SCHEMA = core_schema.json_or_python_schema(
    json_schema=_ROW,
    python_schema=core_schema.no_info_wrap_validator_function(_instance_or_row, _ROW),
    serialization=core_schema.plain_serializer_function_ser_schema(
        _fields,
        return_schema=core_schema.typed_dict_schema(
            {
                "sha256": core_schema.typed_dict_field(core_schema.str_schema()),
                "size": core_schema.typed_dict_field(core_schema.int_schema()),
                "mode": core_schema.typed_dict_field(core_schema.int_schema()),
                "mtime": core_schema.typed_dict_field(core_schema.float_schema()),
            }
        ),
    ),
    ref="skillfs.model.file_entry.FileEntry",
)
_new = object.__new__
_set_key = FileEntry.__dict__["_key"].__set__
_set_mode = FileEntry.__dict__["mode"].__set__
_set_mtime = FileEntry.__dict__["mtime"].__set__
_ARGS = SchemaValidator(_ARGS_SCHEMA, config=core_schema.CoreConfig(title="FileEntry"))
_VALIDATOR = SchemaValidator(_SCHEMA, config=core_schema.CoreConfig(title="FileEntry"))
_SERIALIZER = SchemaSerializer(_SCHEMA)
