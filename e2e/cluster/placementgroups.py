"""EC2 placement groups for the local AWS, in the test environment only (moto 5.2.5 has none: it answers
``CreatePlacementGroup``/``DescribePlacementGroups`` with an HTTP 500), and two fixes of moto's CreateFleet for
what karpy's (and Karpenter's) launch templates carry.

:class:`PlacementGroupsAPI` is WSGI middleware around moto's application (as :class:`e2e.cluster.aws.RequestLog`
is) that answers the EC2 Query actions ``CreatePlacementGroup``, ``DescribePlacementGroups`` and
``DeletePlacementGroup`` itself, in EC2's wire shapes (``<placementGroup>`` / ``<placementGroupSet>`` items with
``groupName``, ``groupId``, ``groupArn``, ``state``, ``strategy``, ``partitionCount``, ``spreadLevel``,
``tagSet``; EC2's error envelope with ``InvalidPlacementGroup.Unknown`` for an unknown name,
``InvalidPlacementGroupId.NotFound`` for an unknown id, ``InvalidPlacementGroup.Duplicate`` for a taken name,
``InvalidParameterValue`` for a bad strategy), and passes every other request to moto. Groups live in this process
(:data:`STORE`, per region), like moto's own state. ``DescribePlacementGroups`` filters: ``group-name``,
``group-id``, ``group-arn``, ``state``, ``strategy``, ``spread-level``, ``tag:<key>``, ``tag-key``. A deleted
group stays listed with state ``deleted`` (EC2 lists deleted groups for a while too).

:func:`patch_moto_fleets` fixes, in moto's CreateFleet, two gaps karpy's launch templates run into:

* moto takes an instance's security groups from the template's ``SecurityGroupIds`` only (with
  :func:`e2e.cluster.aws._spot_fleets_honour_security_group_ids`); Karpenter's templates, and karpy's, name them on
  the primary network interface (``NetworkInterfaces[DeviceIndex 0].Groups``) instead. Without the fix the
  instance gets the VPC's default group and is rightly judged ``SecurityGroupDrift``.
* moto ignores the template's ``Placement.GroupId``/``GroupName``/``PartitionNumber``: after the fix the instance is
  in the group, DescribeInstances shows ``Placement.GroupName``, ``GroupId`` and ``PartitionNumber`` (the template's,
  else partition 1…N round-robin for a partition group, as EC2 spreads them), and a launch into an unknown or
  deleted group fails like EC2's (``InvalidPlacementGroup.Unknown``).

moto keeps the template's ``NetworkInterfaces`` and ``Placement`` as sent (DescribeLaunchTemplateVersions returns
them), and still attaches one primary interface per instance whatever the template lists.
"""

from __future__ import annotations

import io
import itertools
import re
import secrets
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from xml.sax.saxutils import escape

import attrs

ACCOUNT_ID = "123456789012"  # moto's DEFAULT_ACCOUNT_ID
XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
STRATEGIES = ("cluster", "partition", "spread")
ACTIONS = ("CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup")
_REGION = re.compile(r"Credential=[^/]+/[^/]+/([^/]+)/ec2/aws4_request")


@attrs.define
class Group:
    """One placement group as EC2 describes it."""

    name: str
    id: str
    strategy: str
    region: str
    partition_count: int = 0
    spread_level: str = ""
    state: str = "available"
    tags: dict[str, str] = attrs.field(factory=dict)
    next_partition: Iterable[int] = attrs.field(default=(), repr=False)

    @property
    def arn(self) -> str:
        return f"arn:aws:ec2:{self.region}:{ACCOUNT_ID}:placement-group/{self.name}"


class EC2Error(Exception):
    """An EC2 error answer: ``code``, ``message``, HTTP ``status``."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class PlacementGroupStore:
    """The placement groups of each region (thread-safe: moto's server is threaded)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[str, str], Group] = {}  # (region, name) → group

    def create(
        self,
        region: str,
        name: str,
        strategy: str,
        partition_count: int = 0,
        spread_level: str = "",
        tags: Mapping[str, str] | None = None,
    ) -> Group:
        """A new group (EC2 ``CreatePlacementGroup``).

        Raises:
            EC2Error: a live group has the name, or the strategy is not cluster, partition or spread.
        """
        if strategy not in STRATEGIES:
            raise EC2Error("InvalidParameterValue", f"Value ({strategy}) for parameter strategy is invalid.")
        with self._lock:
            existing = self._groups.get((region, name))
            if existing is not None and existing.state != "deleted":
                raise EC2Error("InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists.")
            count = (partition_count or 2) if strategy == "partition" else 0
            group = Group(
                name=name,
                id="pg-" + secrets.token_hex(9)[:17],
                strategy=strategy,
                region=region,
                partition_count=count,
                spread_level=(spread_level or "rack") if strategy == "spread" else "",
                tags=dict(tags or {}),
                next_partition=itertools.cycle(range(1, count + 1)) if count else (),
            )
            self._groups[(region, name)] = group
            return group

    def delete(self, region: str, name: str) -> None:
        """Mark the group deleted (EC2 ``DeletePlacementGroup``).

        Raises:
            EC2Error: no live group has the name.
        """
        with self._lock:
            group = self._groups.get((region, name))
            if group is None or group.state == "deleted":
                raise EC2Error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
            group.state = "deleted"

    def groups(self, region: str) -> list[Group]:
        """Every group of ``region`` (deleted ones too), by name."""
        with self._lock:
            return sorted((g for (r, _), g in self._groups.items() if r == region), key=lambda g: g.name)

    def find(self, region: str, *, name: str = "", group_id: str = "") -> Group | None:
        """The group of that name or id in ``region`` (any state), None when there is none."""
        return next(
            (g for g in self.groups(region) if (name and g.name == name) or (group_id and g.id == group_id)), None
        )

    def partition_for(self, group: Group) -> int:
        """The partition EC2 would place the next instance of a partition group in (round-robin)."""
        with self._lock:
            return next(iter(group.next_partition)) if group.partition_count else 0

    def clear(self) -> None:
        """Forget every group (tests that need a clean slate)."""
        with self._lock:
            self._groups.clear()


STORE = PlacementGroupStore()
_FLEET = threading.local()  # .backend: the EC2 backend of the fleet being built in this thread


def _params(environ: dict[str, Any]) -> dict[str, str]:
    """The Query parameters of a request (query string and form body; the body is put back for moto)."""
    params = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING") or ""))
    if str(environ.get("CONTENT_TYPE") or "").startswith("application/x-www-form-urlencoded"):
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(size) if size else b""
        environ["wsgi.input"] = io.BytesIO(body)
        params.update(urllib.parse.parse_qsl(body.decode(errors="replace")))
    return params


def _members(params: Mapping[str, str], prefix: str) -> list[str]:
    """``prefix.1``, ``prefix.2``, … in order."""
    found = [(int(k[len(prefix) + 1 :]), v) for k, v in params.items() if re.fullmatch(rf"{re.escape(prefix)}\.\d+", k)]
    return [v for _, v in sorted(found)]


def _filters(params: Mapping[str, str]) -> dict[str, list[str]]:
    """``Filter.N.Name`` → its ``Filter.N.Value.M`` values."""
    out: dict[str, list[str]] = {}
    for n in sorted({int(m.group(1)) for k in params if (m := re.fullmatch(r"Filter\.(\d+)\.Name", k))}):
        out[params[f"Filter.{n}.Name"]] = _members(params, f"Filter.{n}.Value")
    return out


def _tags(params: Mapping[str, str]) -> dict[str, str]:
    """The tags of the ``placement-group`` TagSpecification."""
    tags: dict[str, str] = {}
    for n in sorted(
        {int(m.group(1)) for k in params if (m := re.fullmatch(r"TagSpecification\.(\d+)\.ResourceType", k))}
    ):
        if params[f"TagSpecification.{n}.ResourceType"] != "placement-group":
            continue
        for m in sorted(
            {int(x.group(1)) for k in params if (x := re.fullmatch(rf"TagSpecification\.{n}\.Tag\.(\d+)\.Key", k))}
        ):
            tags[params[f"TagSpecification.{n}.Tag.{m}.Key"]] = params.get(f"TagSpecification.{n}.Tag.{m}.Value", "")
    return tags


def _matches(group: Group, filters: Mapping[str, list[str]]) -> bool:
    for name, values in filters.items():
        if name.startswith("tag:"):
            value = group.tags.get(name[4:])
        elif name == "tag-key":
            if not set(values) & group.tags.keys():
                return False
            continue
        else:
            attribute = {
                "group-name": group.name,
                "group-id": group.id,
                "group-arn": group.arn,
                "state": group.state,
                "strategy": group.strategy,
                "spread-level": group.spread_level,
            }
            if name not in attribute:
                raise EC2Error("InvalidParameterValue", f"The filter '{name}' is invalid")
            value = attribute[name]
        if value is None or value not in values:
            return False
    return True


def _group_xml(group: Group, tag: str) -> str:
    fields = [
        ("groupName", group.name),
        ("state", group.state),
        ("strategy", group.strategy),
        ("partitionCount", str(group.partition_count) if group.partition_count else ""),
        ("groupId", group.id),
        ("groupArn", group.arn),
        ("spreadLevel", group.spread_level),
    ]
    body = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in fields if v)
    tags = "".join(
        f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>" for k, v in sorted(group.tags.items())
    )
    return f"<{tag}>{body}<tagSet>{tags}</tagSet></{tag}>"


def _response(action: str, inner: str) -> bytes:
    request_id = secrets.token_hex(16)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{XMLNS}">'
        f"<requestId>{request_id}</requestId>{inner}</{action}Response>"
    ).encode()


def _error(err: EC2Error) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
        f"<Code>{escape(err.code)}</Code><Message>{escape(err.message)}</Message>"
        f"</Error></Errors><RequestID>{secrets.token_hex(16)}</RequestID></Response>"
    ).encode()


def handle(action: str, params: Mapping[str, str], region: str, store: PlacementGroupStore = STORE) -> bytes:
    """The XML answer of one placement-group action.

    Raises:
        EC2Error: the request fails as EC2 would fail it.
    """
    if action == "CreatePlacementGroup":
        group = store.create(
            region,
            params.get("GroupName", ""),
            params.get("Strategy", ""),
            int(params.get("PartitionCount") or 0),
            params.get("SpreadLevel", ""),
            _tags(params),
        )
        return _response(action, _group_xml(group, "placementGroup"))
    if action == "DeletePlacementGroup":
        store.delete(region, params.get("GroupName", ""))
        return _response(action, "<return>true</return>")
    names, ids = _members(params, "GroupName"), _members(params, "GroupId")
    groups = store.groups(region)
    for name in names:
        if not any(g.name == name for g in groups):
            raise EC2Error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
    for group_id in ids:
        if not any(g.id == group_id for g in groups):
            raise EC2Error("InvalidPlacementGroupId.NotFound", f"The Placement Group ID '{group_id}' does not exist.")
    if names or ids:
        groups = [g for g in groups if g.name in names or g.id in ids]
    filters = _filters(params)
    items = "".join(_group_xml(g, "item") for g in groups if _matches(g, filters))
    return _response(action, f"<placementGroupSet>{items}</placementGroupSet>")


class PlacementGroupsAPI:
    """WSGI middleware: EC2's placement-group actions answered from :data:`STORE`, everything else by ``app``."""

    def __init__(self, app: Callable[..., Iterable[bytes]], store: PlacementGroupStore = STORE) -> None:
        self.app = app
        self.store = store

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if str(environ.get("PATH_INFO") or "").startswith("/moto-api"):
            return self.app(environ, start_response)
        params = _params(environ)
        action = params.get("Action", "")
        if action not in ACTIONS:
            return self.app(environ, start_response)
        scope = _REGION.search(str(environ.get("HTTP_AUTHORIZATION") or ""))
        region = scope.group(1) if scope else "us-east-1"
        try:
            body, status = handle(action, params, region, self.store), "200 OK"
        except EC2Error as err:
            body, status = _error(err), f"{err.status} Bad Request"
        start_response(status, [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))])
        return [body]


def patch_moto_fleets(store: PlacementGroupStore = STORE) -> None:
    """Make moto's CreateFleet honour the template's primary-interface security groups and its placement group
    (module docstring). Run after :func:`e2e.cluster.aws._spot_fleets_honour_security_group_ids`; idempotent."""
    from moto.ec2.models import fleets

    if getattr(fleets.Fleet, "karpy_placement_patched", False):
        return
    base_spec = fleets.SpotFleetLaunchSpec

    class LaunchSpec(base_spec):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            data = _template_data(_FLEET.backend, kwargs.get("launch_template_spec") or {})
            if not kwargs.get("group_set"):
                primary = [ni for ni in data.get("NetworkInterfaces") or [] if int(ni.get("DeviceIndex") or 0) == 0]
                if primary:
                    kwargs["group_set"] = list(primary[0].get("Groups") or [])
            super().__init__(*args, **kwargs)
            self.karpy_placement = dict(data.get("Placement") or {})

    class Fleet(fleets.Fleet):  # type: ignore[misc, valid-type]
        karpy_placement_patched = True

        def __init__(self, ec2_backend: Any, *args: Any) -> None:
            region = str(ec2_backend.region_name)
            for config in args[4] or []:  # launch_template_configs (FleetsBackend.create_fleet passes positionals)
                data = _template_data(ec2_backend, config.get("LaunchTemplateSpecification") or {})
                _check_placement(store, region, data)
            _FLEET.backend = ec2_backend  # for the launch specs built in this thread (moto's server is threaded)
            try:
                super().__init__(ec2_backend, *args)
            finally:
                _FLEET.backend = None
            launched = [(i["instance"], i.get("launch_spec")) for i in self.on_demand_instances]
            launched += [(r.instance, r.launch_spec) for r in self.spot_requests]
            for instance, spec in launched:
                _place(store, region, instance, getattr(spec, "karpy_placement", {}))

    fleets.SpotFleetLaunchSpec = LaunchSpec
    fleets.Fleet = Fleet  # FleetsBackend.create_fleet reads the module global


def _template_data(backend: Any, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The LaunchTemplateData of a fleet's template spec (by id or name; ``$Latest``/``$Default``/number) in
    ``backend`` (moto's EC2 backend of the fleet's region); {} when there is none."""
    if backend is None:
        return {}
    try:
        if spec.get("LaunchTemplateId"):
            template = backend.get_launch_template(spec["LaunchTemplateId"])
        elif spec.get("LaunchTemplateName"):
            template = backend.get_launch_template_by_name(spec["LaunchTemplateName"])
        else:
            return {}
    except Exception:  # moto raises its own NotFound: the fleet reports it
        return {}
    version = str(spec.get("Version") or "$Default")
    if version == "$Latest":
        version = str(template.latest_version_number)
    elif version == "$Default":
        version = str(template.default_version_number)
    return dict(template.get_version(version).data)


def _check_placement(store: PlacementGroupStore, region: str, data: Mapping[str, Any]) -> None:
    """EC2 refuses a launch into a placement group that does not exist (or was deleted).

    Raises:
        EC2ClientError: moto's error type, answered as ``InvalidPlacementGroup.Unknown``.
    """
    placement = data.get("Placement") or {}
    name, group_id = str(placement.get("GroupName") or ""), str(placement.get("GroupId") or "")
    if not (name or group_id):
        return
    group = store.find(region, name=name, group_id=group_id)
    if group is None or group.state != "available":
        from moto.ec2.exceptions import EC2ClientError

        raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{name or group_id}' is unknown.")


def _place(store: PlacementGroupStore, region: str, instance: Any, placement: Mapping[str, Any]) -> None:
    """Put a just-launched moto instance into the template's placement group (DescribeInstances shows it)."""
    name, group_id = str(placement.get("GroupName") or ""), str(placement.get("GroupId") or "")
    group = store.find(region, name=name, group_id=group_id) if (name or group_id) else None
    if group is None:
        return
    instance.placement.group_name = group.name
    instance.placement.group_id = group.id
    if group.strategy == "partition":
        number = placement.get("PartitionNumber")
        instance.placement.partition_number = int(number) if number else store.partition_for(group)


__all__ = ["STORE", "EC2Error", "Group", "PlacementGroupStore", "PlacementGroupsAPI", "handle", "patch_moto_fleets"]
