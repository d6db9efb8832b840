"""EC2NodeClass selector terms as EC2 ``Filters`` (shared by the subnet, security-group and AMI providers).

Karpenter AWS ``pkg/providers/{subnet,securitygroup,amifamily}``: selector terms are ORed, fields within a term
are ANDed, and a tag value ``"*"`` matches any value of that key.
"""

from __future__ import annotations

from collections.abc import Mapping

from karpy.apis.meta import JSON


def tag_filters(tags: Mapping[str, str]) -> list[JSON]:
    """EC2 filters for a ``tags`` selector (``"*"`` → any value of the key)."""
    filters = []
    for key, value in sorted(tags.items()):
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters
