"""MIME multi-part archives as Go's ``mime/multipart`` reads and writes them, carriage returns removed
(Karpenter AWS ``pkg/providers/amifamily/bootstrap/mime/mime.go`` and ``eksbootstrap.go``).

A part is (headers, content): headers in canonical MIME form (``Content-Type``), content the bytes between the
header block and the newline before the next delimiter. :func:`serialize` writes boundary ``//``, each part's
headers sorted by key, and the closing delimiter, exactly as ``multipart.Writer`` does. Pure: no I/O.

Hand-written, not :mod:`email`, because AL2/AL2023 user data must equal Karpenter's byte for byte
(``tests/reference/test_reference_userdata.py``): :mod:`email`'s generator writes its own header order, line
folding and per-part ``MIME-Version``, and its parser keeps headers Go's reader canonicalises differently.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Final

BOUNDARY: Final = "//"
SHELL_SCRIPT: Final = 'text/x-shellscript; charset="us-ascii"'
NODE_CONFIG: Final = "application/node.eks.aws"

Part = tuple[list[tuple[str, str]], str]


class MIMEError(ValueError):
    """User data that claims to be MIME (starts with ``MIME-Version:``/``Content-Type:``) but is not multipart."""


def is_mime(user_data: str) -> bool:
    """Whether Karpenter takes ``user_data`` as a MIME document (its trimmed text starts with a MIME header)."""
    text = user_data.strip()
    return text.startswith("MIME-Version:") or text.startswith("Content-Type:")


def canonical_key(key: str) -> str:
    """``textproto.CanonicalMIMEHeaderKey``: ``content-type`` → ``Content-Type``."""
    return "-".join(w[:1].upper() + w[1:].lower() for w in key.strip().split("-"))


def _headers(block: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for line in block.split("\n"):
        if not line:
            continue
        if line[0] in " \t" and out:
            out[-1] = (out[-1][0], out[-1][1] + " " + line.strip())
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise MIMEError(f"malformed MIME header line {line!r}")
        out.append((canonical_key(key), value.strip()))
    return out


def header(headers: Sequence[tuple[str, str]], key: str) -> str:
    """The first value of ``key`` ("" when absent)."""
    return next((v for k, v in headers if k == key), "")


def parse(user_data: str) -> list[Part]:
    """The parts of a multipart document (``mail.ReadMessage`` + ``multipart.Reader``).

    Raises:
        MIMEError: no ``multipart/*`` Content-Type with a boundary, or a malformed header.
    """
    text = user_data.replace("\r", "").lstrip("\n")
    head, _, body = text.partition("\n\n")
    content_type = header(_headers(head), "Content-Type")
    media, _, params = content_type.partition(";")
    match = re.search(r'boundary\s*=\s*(?:"([^"]*)"|([^\s;]+))', params)
    if not media.strip().lower().startswith("multipart/") or not match:
        raise MIMEError("user data is not in multipart MIME format")
    boundary = match.group(1) if match.group(1) is not None else match.group(2)
    delimiter = re.compile(r"(?:^|\n)--" + re.escape(boundary) + r"(--)?[ \t]*(?:\n|$)")
    parts: list[Part] = []
    matches = list(delimiter.finditer(body))
    for current, following in itertools.pairwise(matches):
        if current.group(1):
            break
        segment = body[current.end() : following.start()]
        if segment.startswith("\n"):
            parts.append(([], segment[1:]))
            continue
        block, sep, content = segment.partition("\n\n")
        if not sep:
            block, content = segment, ""
        parts.append((_headers(block), content))
    return parts


def serialize(parts: Sequence[Part]) -> str:
    """``MIME-Version: 1.0`` + ``multipart/mixed; boundary="//"`` + each part (headers sorted by key) + the
    closing delimiter, as ``multipart.Writer`` writes them with ``\\r`` removed."""
    out = ["MIME-Version: 1.0\n", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"\n\n']
    for i, (headers, content) in enumerate(parts):
        out.append(f"\n--{BOUNDARY}\n" if i else f"--{BOUNDARY}\n")
        for key, value in sorted(headers, key=lambda kv: kv[0]):
            out.append(f"{key}: {value}\n")
        out.append("\n")
        out.append(content.replace("\r", ""))
    out.append(f"\n--{BOUNDARY}--\n")
    return "".join(out)
