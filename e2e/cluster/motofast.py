"""moto at the scale of a big provisioning batch: an EC2 resource's tags read by id, not by scanning every tag, and
query-protocol requests parsed in O(parameters), not O(parameters x structures).

moto 5's ``TaggedEC2Resource.get_tags`` asks ``TagBackend.describe_tags`` with a ``resource-id`` filter, which
walks every tag of every resource in the region and regex-matches each resource id. DescribeInstances reads each
instance's tags (for the answer and for every ``tag:``/``tag-key`` filter), so one DescribeInstances over N
instances costs O(N × all tags) = O(N²). With a few hundred instances (one per NodeClaim of a 1,000-pod batch of
small nodes) that is seconds of CPU per call, in the process that also runs the node agent and every other moto
request, and it dominated the live benchmark (py-spy: most of moto's time in ``describe_tags``).

:func:`patch_moto_tags` replaces ``get_tags`` with a direct read of ``TagBackend.tags[resource_id]``: the same
list (``resource_id``, ``key``, ``value``, ``resource_type``, in insertion order) ``describe_tags`` returns for an
exact id (``simple_aws_filter_to_re`` anchors the pattern, and EC2 ids have no wildcard characters).

:func:`patch_moto_query_parser`: moto 5's ``QueryParser._gonna_recurse`` (is there any parameter under this
prefix?) scans every query parameter for every structure it might parse. A CreateFleet with karpy's overrides (up
to 60 instance types x 3 subnets, ~540 parameters, each override a structure with nested optional structures)
made ~33,000 such scans per call: 0.7 s of CPU per CreateFleet, the launch rate limit of the whole benchmark
(cProfile of moto's CreateFleet). The patch answers the same question by bisecting the sorted parameter names,
computed once per request.

:func:`patch_moto_fleet_instance_tags`: EC2 tags every instance a fleet launches with
``aws:ec2launchtemplate:id``/``aws:ec2launchtemplate:version`` (the template version it was launched from) and
``aws:ec2:fleet-id``; moto 5 tags only RunInstances' instances. With the tags the node agent reads an instance's
template directly instead of listing every fleet (DescribeFleets over a few hundred fleets of 180 overrides each
was seconds per agent pass).

All idempotent; applied by :func:`e2e.cluster.aws.start_moto` (the fleet patch after
:func:`e2e.cluster.placementgroups.patch_moto_fleets`, whose Fleet class it extends).
"""

from __future__ import annotations

import bisect
from typing import Any

_PATCHED = "_karpy_fast_tags"
_PATCHED_PARSER = "_karpy_fast_prefix"
_PATCHED_FLEET = "karpy_fleet_tags_patched"
LAUNCH_TEMPLATE_ID_TAG = "aws:ec2launchtemplate:id"
LAUNCH_TEMPLATE_VERSION_TAG = "aws:ec2launchtemplate:version"
FLEET_ID_TAG = "aws:ec2:fleet-id"


def resource_tags(backend: Any, resource_id: str) -> list[dict[str, str]]:
    """``backend.describe_tags(filters={"resource-id": [resource_id]})``'s answer, read by id."""
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    tags = backend.tags.get(resource_id)  # .get: the backend's defaultdict must not grow an entry per read
    if not tags:
        return []
    kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
    return [
        {"resource_id": resource_id, "key": key, "value": value, "resource_type": kind}
        for key, value in list(tags.items())  # a copy: another request may tag the resource meanwhile
    ]


def patch_moto_tags() -> None:
    """Make ``TaggedEC2Resource.get_tags`` (every tagged EC2 resource's tag read) O(its own tags)."""
    from moto.ec2.models.core import TaggedEC2Resource

    if getattr(TaggedEC2Resource, _PATCHED, False):
        return

    def get_tags(self: Any) -> list[dict[str, str]]:
        return resource_tags(self.ec2_backend, self.id) if self.id else []

    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]
    setattr(TaggedEC2Resource, _PATCHED, True)


def has_param_under(sorted_names: list[str], prefix: str) -> bool:
    """Some name in ``sorted_names`` (sorted) starts with ``prefix``."""
    i = bisect.bisect_left(sorted_names, prefix)
    return i < len(sorted_names) and sorted_names[i].startswith(prefix)


def patch_moto_query_parser() -> None:
    """Make moto's query-protocol parsing O(parameters): ``_gonna_recurse`` by bisection over the request's sorted
    parameter names (computed once per parameter dict), with moto's answer."""
    from moto.core.parse import QueryParser

    if getattr(QueryParser, _PATCHED_PARSER, False):
        return

    def _gonna_recurse(self: Any, query_params: Any, prefix: str) -> bool:
        if prefix == "":
            return False
        cached = getattr(self, "_karpy_sorted_params", None)
        if cached is None or cached[0] is not query_params:
            cached = (query_params, sorted(query_params))
            self._karpy_sorted_params = cached
        return not has_param_under(cached[1], prefix)

    QueryParser._karpy_moto_gonna_recurse = QueryParser._gonna_recurse  # type: ignore[attr-defined]  # moto's own
    QueryParser._gonna_recurse = _gonna_recurse  # type: ignore[method-assign]
    setattr(QueryParser, _PATCHED_PARSER, True)


def fleet_instance_tags(fleet_id: str, launch_template_spec: Any) -> dict[str, str]:
    """The AWS-managed tags EC2 puts on an instance launched by fleet ``fleet_id`` from ``launch_template_spec``
    (moto's resolved spec: ``LaunchTemplateId`` and a version number)."""
    tags = {FLEET_ID_TAG: fleet_id}
    spec = launch_template_spec or {}
    if spec.get("LaunchTemplateId"):
        tags[LAUNCH_TEMPLATE_ID_TAG] = str(spec["LaunchTemplateId"])
        if spec.get("Version"):
            tags[LAUNCH_TEMPLATE_VERSION_TAG] = str(spec["Version"])
    return tags


def patch_moto_fleet_instance_tags() -> None:
    """Tag a fleet's instances as EC2 does (see the module docstring)."""
    from moto.ec2.models import fleets

    if getattr(fleets.Fleet, _PATCHED_FLEET, False):
        return

    class Fleet(fleets.Fleet):  # type: ignore[misc, valid-type, name-defined]
        karpy_fleet_tags_patched = True

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            launched = [(i["instance"], i.get("launch_spec")) for i in self.on_demand_instances]
            launched += [(r.instance, r.launch_spec) for r in self.spot_requests]
            for instance, spec in launched:
                if instance is not None:
                    instance.add_tags(fleet_instance_tags(self.id, getattr(spec, "launch_template_spec", None)))

    fleets.Fleet = Fleet  # FleetsBackend.create_fleet reads the module global
