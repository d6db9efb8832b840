"""moto answering DescribeInstanceTypes and DescribeInstanceTypeOfferings in pages, as EC2 does.

EC2 pages both: DescribeInstanceTypes returns at most ``MaxResults`` (5–100, 100 when unset) types per call,
DescribeInstanceTypeOfferings at most ``MaxResults`` (5–1000, 1000 when unset) offerings, each with a
``NextToken`` while more remain. moto 5 ignores both and returns everything in one answer: ~1,400 instance types
in one XML document of several MB. A controller that reads the catalogue with botocore's paginator (karpy, like
Karpenter) then parses that whole document at once — ~36 MiB of transient ElementTree and dicts in the
controller, which the live benchmark's peak RSS counted though no real EC2 answer is that big.

:func:`patch_moto_instance_type_pages` makes both answers pages of EC2's default size (or ``MaxResults``);
``NextToken`` is the offset of the next page. Idempotent; applied by :func:`e2e.cluster.aws.start_moto`.
"""

from __future__ import annotations

from typing import Any

_PATCHED = "_karpy_instance_type_pages"
# moto's own InstanceResponse methods, kept when the patch first replaces them (a test compares against them).
_ORIGINALS: dict[str, Any] = {}
INSTANCE_TYPES_PAGE = 100
OFFERINGS_PAGE = 1000


def page(items: list[Any], max_results: Any, next_token: Any, default: int) -> tuple[list[Any], str | None]:
    """``items[offset : offset + size]`` and the token of the next page (None on the last): ``size`` is
    ``max_results`` (default ``default``), ``offset`` the integer ``next_token`` (0 when unset)."""
    size = int(max_results or default)
    start = int(next_token or 0)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)


def patch_moto_instance_type_pages() -> None:
    """Page moto's DescribeInstanceTypes and DescribeInstanceTypeOfferings (see the module docstring)."""
    from moto.ec2.responses.instances import InstanceResponse

    if getattr(InstanceResponse, _PATCHED, False):
        return
    for name, key, default in (
        ("describe_instance_types", "InstanceTypes", INSTANCE_TYPES_PAGE),
        ("describe_instance_type_offerings", "InstanceTypeOfferings", OFFERINGS_PAGE),
    ):
        original = _ORIGINALS.setdefault(name, getattr(InstanceResponse, name))
        setattr(InstanceResponse, name, _paged(original, key, default))
    setattr(InstanceResponse, _PATCHED, True)


def _paged(original: Any, key: str, default: int) -> Any:
    """moto's response method ``original`` (its parameters and filters as moto handles them) with its ``key``
    list answered one page at a time (``MaxResults``, ``NextToken``; ``default`` items per page)."""
    from moto.core.responses import ActionResult

    def paged(self: Any) -> Any:
        result = dict(original(self).result)
        items, token = page(result[key], self._get_param("MaxResults"), self._get_param("NextToken"), default)
        result[key] = items
        if token is not None:
            result["NextToken"] = token
        return ActionResult(result)

    return paged


def moto_own(name: str) -> Any:
    """moto's own ``InstanceResponse.<name>`` (unpaged), whether or not the patch is applied in this process."""
    from moto.ec2.responses.instances import InstanceResponse

    return _ORIGINALS.get(name, getattr(InstanceResponse, name))
