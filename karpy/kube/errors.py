"""Kubernetes API errors as one typed exception, classified by HTTP status (apimachinery ``StatusReason``)."""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """A non-2xx answer from kube-apiserver.

    Attributes:
        status: HTTP status (404 NotFound, 409 Conflict/AlreadyExists, 410 Gone, 422 Invalid,
            429 TooManyRequests — also a PDB-blocked eviction, 500 …).
        reason: the ``Status.reason`` (e.g. ``AlreadyExists``, ``Conflict``), "" when absent.
        message: the ``Status.message``.
    """

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @classmethod
    def from_body(cls, status: int, text: str) -> ApiError:
        """Build from a response body, which is a ``Status`` object when the apiserver produced it."""
        try:
            body = json.loads(text) if text else {}
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        return cls(status, str(body.get("reason", "")), str(body.get("message", text[:500])), body)

    @property
    def not_found(self) -> bool:
        """404: the object (or its namespace) does not exist."""
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409: resourceVersion conflict or AlreadyExists."""
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        """409 with reason AlreadyExists."""
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        """410: the watch's resourceVersion is too old; re-list."""
        return self.status == 410

    @property
    def too_many_requests(self) -> bool:
        """429: throttled, or an eviction a PodDisruptionBudget refuses now."""
        return self.status == 429
