"""Security groups selected by an EC2NodeClass (Karpenter AWS ``pkg/providers/securitygroup/securitygroup.go``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from karpy.apis.meta import JSON
from karpy.aws.errors import is_not_found
from karpy.aws.selectors import tag_filters


async def resolve_security_groups(ec2: Any, terms: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """``status.securityGroups`` entries ``{id, name}`` of the groups matching ``terms`` (by ``id``, ``name`` or
    ``tags``), sorted by id. A term naming an unknown group matches nothing.

    Raises:
        botocore ClientError (or a connection error): DescribeSecurityGroups failed.
    """
    found: dict[str, JSON] = {}
    for term in terms:
        if term.get("id"):
            kwargs: JSON = {"GroupIds": [term["id"]]}
        elif term.get("name"):
            kwargs = {"Filters": [{"Name": "group-name", "Values": [term["name"]]}]}
        else:
            kwargs = {"Filters": tag_filters(term.get("tags") or {})}
        try:
            response = await ec2.describe_security_groups(**kwargs)
        except Exception as err:
            if is_not_found(err):
                continue
            raise
        for group in response.get("SecurityGroups") or []:
            found[group["GroupId"]] = group
    return [{"id": g["GroupId"], "name": g.get("GroupName", "")} for _, g in sorted(found.items())]
