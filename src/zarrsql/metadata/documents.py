"""Metadata documents as JSON: decoded safely, and their fields checked for JSON type.

Everything a store holds is untrusted input. `load_document` turns a document's bytes into
JSON values or raises `MetadataError` naming the key: bytes that are not UTF-8 JSON (a
truncated or half-rewritten file), and nesting deeper than `MAX_DEPTH` — refused before
`json.loads` sees it, because the decoder (and every walker after it: `json.dumps` of a
listing, `repr`, the conventions) recurses once per level and a deep document would end in a
`RecursionError` from inside DuckDB.

The `field_*` helpers read one field of a parsed document and raise `MetadataError` when it
has the wrong JSON type, so parsers never call `.get` on a list or iterate over an int.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from zarrsql.errors import MetadataError

#: Deepest nesting of arrays/objects accepted in one document. Real Zarr metadata nests a
#: few levels (OME-Zarr's multiscales about 6, a consolidated document one more than its
#: deepest member); 128 leaves room for arbitrary user attributes while keeping every
#: recursive walk far below Python's recursion limit (1000 frames, some used by DuckDB's call).
MAX_DEPTH = 128

#: A JSON string (skipped: brackets inside it do not nest) or one bracket.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
#: A JSON escape of a UTF-16 surrogate (paired ones are fine; an unpaired one is not text).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def too_deep(raw: bytes) -> bool:
    """Whether arrays and objects nest more than `MAX_DEPTH` levels deep in `raw`."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False  # a document cannot nest deeper than the brackets it opens
    depth = 0
    for match in _TOKENS.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


def _corrupt(key: str, url: str, why: str) -> MetadataError:
    return MetadataError(
        f"'{key}' in store '{url}' is not valid JSON ({why}); the store's metadata is corrupt or "
        "was read while being rewritten: read again, or rewrite it with the tool that created the store"
    )


def load_document(raw: bytes | None, key: str, url: str) -> Any:
    """The JSON value of the document at `key` (None when the key does not exist)."""
    if raw is None:
        return None
    raw = bytes(raw)
    if too_deep(raw):
        raise MetadataError(
            f"'{key}' in store '{url}' nests arrays/objects more than {MAX_DEPTH} levels deep; "
            "no Zarr metadata does: the document is corrupt or hostile, rewrite it"
        )
    try:
        doc = json.loads(raw)
        if _SURROGATE.search(raw):  # an unpaired \ud800 decodes to a str that is not Unicode text
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except RecursionError as err:  # MAX_DEPTH should prevent it; a small thread stack might not
        raise _corrupt(key, url, "nested too deeply to decode") from err
    except UnicodeEncodeError as err:
        raise _corrupt(key, url, "a string escapes an unpaired UTF-16 surrogate") from err
    except (ValueError, UnicodeDecodeError) as err:
        raise _corrupt(key, url, str(err)) from err
    return doc


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def shown(value: Any) -> str:
    """`repr(value)`, cut short: a value in an error message may be a megabyte of JSON."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def wrong_type(where: str, what: str, expected: str, value: Any) -> MetadataError:
    """The error for a field of the wrong JSON type: names the field, what it must be, what it is."""
    return MetadataError(f"{where}: {what} must be {expected}, got {_json_type(value)} ({shown(value)})")


def expect_object(value: Any, where: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise wrong_type(where, what, "a JSON object", value)
    return value


def field_object(doc: Mapping[str, Any], name: str, where: str, *, required: bool = False) -> dict[str, Any]:
    """`doc[name]` as an object; absent (or null, when not required) reads as {}."""
    value = doc.get(name)
    if value is None and not required:
        return {}
    return expect_object(value, where, f"'{name}'")


def field_list(doc: Mapping[str, Any], name: str, where: str) -> list[Any]:
    """`doc[name]` as an array; absent or null reads as []."""
    value = doc.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong_type(where, f"'{name}'", "a JSON array", value)
    return value


def field_choice(doc: Mapping[str, Any], name: str, where: str, choices: tuple[Any, ...], default: Any) -> Any:
    """`doc[name]`, one of `choices`; absent reads as `default`."""
    value = doc.get(name, default)
    if isinstance(value, bool) or value not in choices:
        options = " or ".join(json.dumps(c) for c in choices)
        raise wrong_type(where, f"'{name}'", options, value)
    return value
