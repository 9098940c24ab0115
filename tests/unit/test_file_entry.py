"""`FileEntry` holds a canonical digest packed with its size (skillfs/model/file_entry.py) and
reads, writes, compares and fails exactly as the pydantic dataclass it was."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import pickle
import sys

import pytest
from pydantic import ValidationError

from skillfs.model import FileEntry, Manifest

SHA = hashlib.sha256(b"x").hexdigest()
ODD = [SHA.upper(), "0x" + SHA[2:], " " + SHA[1:], SHA[:-1] + "_", "abc", "", "0" * 63, "g" * 64]


def entry(sha256: str = SHA, size: int = 692) -> FileEntry:
    return FileEntry(sha256=sha256, size=size, mode=0o644, mtime=1795503652.7731328)


@pytest.mark.parametrize("sha256", [SHA, "0" * 64, "f" * 64, *ODD])
@pytest.mark.parametrize("size", [0, 692, -5, 2**70])
def test_any_digest_and_size_round_trip_exactly(sha256: str, size: int) -> None:
    e = entry(sha256, size)
    assert (e.sha256, e.size, type(e.sha256), type(e.size)) == (sha256, size, str, int)
    raw = e.model_dump_json()
    fields = {"sha256": sha256, "size": size, "mode": 420, "mtime": 1795503652.7731328}
    assert raw == json.dumps(fields, separators=(",", ":"))
    assert e.model_dump() == e.model_dump(mode="json") == fields
    back = FileEntry.model_validate_json(raw)
    assert back == e and hash(back) == hash(e) and back.sha256 == sha256
    assert pickle.loads(pickle.dumps(e)) == e == copy.deepcopy(e)


def test_a_canonical_digest_is_held_in_one_int_with_the_size() -> None:
    lean, odd = entry(SHA), entry(SHA.upper())
    held = sys.getsizeof(lean._key)
    assert isinstance(lean._key, int) and held < sys.getsizeof(SHA)
    assert isinstance(odd._key, tuple)  # kept as given, so it reads back as given
    assert repr(lean) == (
        f"FileEntry(sha256='{SHA}', size=692, mode=420, mtime=1795503652.7731328)"
    )


def test_it_compares_copies_and_stays_frozen_as_the_dataclass_did() -> None:
    e = entry()
    assert e != entry(size=693) and e != entry(SHA.upper()) and e != (e._key, e.mode, e.mtime)
    assert e.model_copy(update={"mode": 0o755}).mode == 0o755
    assert e.model_copy(update={"mode": 0o755}).sha256 == SHA
    with pytest.raises(ValidationError, match="mode"):
        e.model_copy(update={"mode": "x"})
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'size'"):
        e.size = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del e.mode


def test_bad_entries_fail_with_the_dataclass_errors() -> None:
    with pytest.raises(ValidationError) as caught:
        FileEntry(sha256=None, size="x", mode=1, mtime=0.0)  # type: ignore[arg-type]
    assert caught.value.title == "FileEntry"
    assert [(e["type"], e["loc"]) for e in caught.value.errors()] == [
        ("string_type", ("sha256",)),
        ("int_parsing", ("size",)),
    ]
    with pytest.raises(ValidationError, match="Input should be a dictionary or an instance"):
        FileEntry.model_validate(5)
    bad = {"sha256": SHA, "size": 1, "mode": 1, "mtime": None}
    raw = json.dumps({"skill": "s", "version": 1, "commit_id": "c", "committed_at": 1.0,
                      "files": {"a.txt": bad}})  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        Manifest.model_validate_json(raw)
    assert [(e["type"], e["loc"]) for e in caught.value.errors()] == [
        ("float_type", ("files", "a.txt", "mtime"))
    ]
    with pytest.raises(ValidationError, match="Input should be an object"):
        Manifest.model_validate_json(raw.replace(json.dumps(bad), '"x"'))
