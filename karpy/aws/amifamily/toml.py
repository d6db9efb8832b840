"""TOML output as ``github.com/pelletier/go-toml/v2`` ``Marshal`` writes it (the encoder Karpenter's Bottlerocket
user data uses), for the value shapes that user data holds. Pure: no I/O.

Go maps are plain ``dict`` (keys sorted); Go structs are :class:`Struct` (fields in declaration order, absent
fields left out by the caller). In a table, key/values come first, then sub-tables; every table gets a header,
even one with only sub-tables; a header is preceded by an empty line unless the previous line was a header. A
list of tables is an array of tables (``[[...]]``); a table inside a value is an inline table. Strings are
literal (``'...'``) unless they hold a single quote or a control character; keys are bare when made of
``A-Za-z0-9_-``.

Hand-written, not a library encoder, because Bottlerocket user data must equal Karpenter's byte for byte
(``tests/reference/test_reference_userdata.py``): ``tomli_w`` writes basic (``"..."``) strings, keeps no Go
struct field order apart from map key order, and lays out headers and blank lines differently. Parsing uses ``tomllib``.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


class Struct(dict[str, Any]):
    """A Go struct: its keys are written in insertion (declaration) order, not sorted."""


def _entries(table: Mapping[str, Any]) -> list[tuple[str, Any]]:
    items = [(k, v) for k, v in table.items() if v is not None]
    return items if isinstance(table, Struct) else sorted(items, key=lambda kv: kv[0])


def _is_table(value: Any) -> bool:
    if isinstance(value, Mapping):
        return True
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _string(text: str) -> str:
    if all(c != "'" and c != "\x7f" and ord(c) >= 0x20 for c in text):
        return f"'{text}'"
    escapes = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    out = []
    for c in text:
        if c in escapes:
            out.append(escapes[c])
        elif ord(c) < 0x20 or c == "\x7f":
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _key(key: str) -> str:
    return key if _BARE.match(key) else _string(key)


def _float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(value)
    if "e" in text:
        text = f"{value:f}".rstrip("0").rstrip(".")
    return text if any(c in text for c in ".eE") else text + ".0"


def value(v: Any) -> str:
    """One TOML value (arrays and tables inline)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, datetime.datetime | datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, list | tuple):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {value(x)}" for k, x in _entries(v)) + "}"
    raise TypeError(f"cannot encode {type(v).__name__} as TOML")


class _Encoder:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.last_was_header = False

    def header(self, keys: list[str], array: bool) -> None:
        if self.lines and not self.last_was_header:
            self.lines.append("\n")
        name = ".".join(_key(k) for k in keys)
        self.lines.append(f"[[{name}]]\n" if array else f"[{name}]\n")
        self.last_was_header = True

    def table(self, table: Mapping[str, Any], keys: list[str]) -> None:
        entries = _entries(table)
        for k, v in entries:
            if not _is_table(v):
                self.lines.append(f"{_key(k)} = {value(v)}\n")
                self.last_was_header = False
        for k, v in entries:
            if not _is_table(v):
                continue
            if isinstance(v, list):
                for element in v:
                    self.header([*keys, k], array=True)
                    self.table(element, [*keys, k])
            else:
                self.header([*keys, k], array=False)
                self.table(v, [*keys, k])


def dumps(document: Mapping[str, Any]) -> str:
    """The TOML document for ``document`` (see the module docstring)."""
    encoder = _Encoder()
    encoder.table(document, [])
    return "".join(encoder.lines)
