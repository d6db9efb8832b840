"""EC2 capacity reservations for the test environment: moto 5.2 has none, so this WSGI middleware around moto's
application serves them on the real EC2 Query wire shapes (form-encoded requests, ``2016-11-15`` XML answers and
errors), and keeps the reservations' instance accounting in step with the instances moto launches.

Served here (moto never sees them):

* ``CreateCapacityReservation`` (``InstanceType``, ``InstancePlatform``, ``AvailabilityZone``, ``Tenancy``,
  ``InstanceCount``, ``EndDate``/``EndDateType``, ``InstanceMatchCriteria`` default ``open``, ``TagSpecifications``):
  an ``active`` ``default`` reservation owned by moto's account, all its instances available;
* ``CreateInterruptibleCapacityReservationAllocation`` (``CapacityReservationId``, ``InstanceCount``): carves an
  *interruptible* reservation of that many instances out of the source's available ones (a new ``cr-…`` with
  ``Interruptible=true``, as the owner of an ODCR lends unused capacity);
* ``DescribeCapacityReservations`` (``CapacityReservationId.N``, ``MaxResults``/``NextToken``, filters ``state``,
  ``owner-id``, ``instance-type``, ``availability-zone``, ``instance-match-criteria``, ``tenancy``,
  ``instance-platform``, ``tag:<key>``, ``tag-key``; an unknown id is ``InvalidCapacityReservationId.NotFound``,
  an unknown filter ``InvalidParameterValue``, both 400 as EC2 answers);
* ``CancelCapacityReservation``: state ``cancelled`` (no more launches; Karpenter asks for ``state=active`` only);
  its running instances go on as on-demand (DescribeInstances shows no ``CapacityReservationId`` any more).

Accounting (moto launches the instances, this module does the reservation's part):

* ``CreateFleet`` whose first launch template targets a reservation (``CapacityReservationSpecification``
  ``CapacityReservationTarget``, as Karpenter's and karpy's reserved launch templates do): refused with the fleet
  error EC2 gives (``ReservationCapacityExceeded`` "Insufficient capacity in the Capacity Reservation", in
  ``errorSet`` with the override, no instance) when no instance is available, ``InvalidCapacityReservationState
  .Unavailable`` when it is not active, ``InvalidParameterCombination`` when the override's instance type or zone
  is not the reservation's; otherwise passed to moto (``DefaultTargetCapacityType`` ``capacity-block`` or
  ``reserved-capacity``, which moto cannot launch, as ``on-demand``) and each launched instance is taken from the
  reservation: ``AvailableInstanceCount`` − 1, and DescribeInstances then shows its ``CapacityReservationId``,
  ``CapacityReservationSpecification`` and, for an interruptible reservation, ``InstanceLifecycle
  interruptible-capacity-reservation``;
* ``RunInstances`` targeting a reservation (``CapacityReservationSpecification.CapacityReservationTarget``, or
  through its launch template) likewise (``ReservationCapacityExceeded`` as a request error when fewer than
  ``MinCount`` are available);
* ``TerminateInstances``: each instance of a reservation gives its slot back once.

Capacity blocks are seeded in-process (:func:`seed_capacity_block`; launches into them get ``InstanceLifecycle
capacity-block``). Not modelled: instances consuming ``open`` reservations without targeting them (Karpenter's launch
templates say ``none`` or target one), ``PurchaseCapacityBlock``, reservation expiry by ``EndDate`` (the reservation
stays ``active``; karpy drops it by its end date as Karpenter does).

State lives in this process (moto's server thread), per region; the launched instances are annotated through
moto's in-process EC2 backend, whose serializer then writes the DescribeInstances fields.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import secrets
import threading
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from xml.sax.saxutils import escape

import attrs

NAMESPACE = "http://ec2.amazonaws.com/doc/2016-11-15/"
_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/[^/]+/([^/]+)/([^/]+)/aws4_request")
HANDLED = frozenset(
    {
        "CreateCapacityReservation",
        "CreateInterruptibleCapacityReservationAllocation",
        "DescribeCapacityReservations",
        "CancelCapacityReservation",
        "CreateFleet",
        "RunInstances",
        "TerminateInstances",
    }
)
FILTERS = {
    "state": "state",
    "owner-id": "owner_id",
    "instance-type": "instance_type",
    "availability-zone": "zone",
    "instance-match-criteria": "match_criteria",
    "tenancy": "tenancy",
    "instance-platform": "platform",
}


class EC2Error(Exception):
    """An EC2 error answer: HTTP 400 with ``<Response><Errors><Error><Code>``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@attrs.define
class Reservation:
    """One capacity reservation, in EC2's terms."""

    id: str
    owner_id: str
    instance_type: str
    platform: str
    zone: str
    zone_id: str
    tenancy: str
    total: int
    available: int
    match_criteria: str
    tags: dict[str, str]
    created: datetime
    end: datetime | None = None
    end_date_type: str = "unlimited"
    state: str = "active"
    reservation_type: str = "default"
    interruptible: bool = False
    instances: set[str] = attrs.field(factory=set)
    returned: set[str] = attrs.field(factory=set)


class Store:
    """The reservations of every region, thread-safe (moto's server is threaded)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.regions: dict[str, dict[str, Reservation]] = {}

    def region(self, name: str) -> dict[str, Reservation]:
        return self.regions.setdefault(name, {})


STORE = Store()
"""The process's reservations (the moto server runs in this process)."""


# Wire helpers ---------------------------------------------------------------------------------------------


def _timestamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _element(name: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, datetime):
        value = _timestamp(value)
    return f"<{name}>{escape(str(value))}</{name}>"


def _response(action: str, body: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{NAMESPACE}">'
        f"<requestId>{uuid.uuid4()}</requestId>{body}</{action}Response>"
    ).encode()


def _error(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


def reservation_xml(r: Reservation, region: str) -> str:
    """One ``CapacityReservation`` in EC2's XML element names."""
    tags = "".join(f"<item>{_element('key', k)}{_element('value', v)}</item>" for k, v in sorted(r.tags.items()))
    return "".join(
        (
            _element("capacityReservationId", r.id),
            _element("ownerId", r.owner_id),
            _element("capacityReservationArn", f"arn:aws:ec2:{region}:{r.owner_id}:capacity-reservation/{r.id}"),
            _element("availabilityZoneId", r.zone_id or None),
            _element("instanceType", r.instance_type),
            _element("instancePlatform", r.platform),
            _element("availabilityZone", r.zone),
            _element("tenancy", r.tenancy),
            _element("totalInstanceCount", r.total),
            _element("availableInstanceCount", r.available),
            _element("ebsOptimized", False),
            _element("ephemeralStorage", False),
            _element("state", r.state),
            _element("startDate", r.created),
            _element("endDate", r.end),
            _element("endDateType", r.end_date_type),
            _element("instanceMatchCriteria", r.match_criteria),
            _element("createDate", r.created),
            f"<tagSet>{tags}</tagSet>",
            _element("reservationType", r.reservation_type),
            _element("interruptible", r.interruptible),
        )
    )


def form(environ: dict[str, Any]) -> dict[str, str]:
    """The request's Query parameters (query string and form body; the body is put back for moto)."""
    params = {k: v[0] for k, v in urllib.parse.parse_qs(environ.get("QUERY_STRING") or "").items()}
    if str(environ.get("CONTENT_TYPE") or "").startswith("application/x-www-form-urlencoded"):
        with contextlib.suppress(ValueError):
            size = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(size) if size else b""
            environ["wsgi.input"] = io.BytesIO(body)
            parsed = urllib.parse.parse_qs(body.decode(errors="replace"), keep_blank_values=True)
            params.update({k: v[0] for k, v in parsed.items()})
    return params


def replace_form(environ: dict[str, Any], params: Mapping[str, str]) -> None:
    """Give moto ``params`` as the form body instead of the request's."""
    body = urllib.parse.urlencode(list(params.items())).encode()
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    environ["QUERY_STRING"] = ""


def numbered(params: Mapping[str, str], prefix: str) -> list[str]:
    """``prefix.1``, ``prefix.2``, … values in order."""
    out = []
    for n in itertools.count(1):
        value = params.get(f"{prefix}.{n}")
        if value is None:
            return out
        out.append(value)
    return out


def tag_specifications(params: Mapping[str, str]) -> dict[str, str]:
    """Tags of the ``capacity-reservation`` TagSpecification(s)."""
    tags: dict[str, str] = {}
    for prefix in ("TagSpecifications", "TagSpecification"):
        for n in itertools.count(1):
            kind = params.get(f"{prefix}.{n}.ResourceType")
            if kind is None:
                break
            if kind != "capacity-reservation":
                continue
            for m in itertools.count(1):
                key = params.get(f"{prefix}.{n}.Tag.{m}.Key")
                if key is None:
                    break
                tags[key] = params.get(f"{prefix}.{n}.Tag.{m}.Value", "")
    return tags


def filters(params: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    out = []
    for n in itertools.count(1):
        name = params.get(f"Filter.{n}.Name")
        if name is None:
            return out
        out.append((name, numbered(params, f"Filter.{n}.Value")))


def matches(r: Reservation, name: str, values: list[str]) -> bool:
    """One DescribeCapacityReservations filter."""
    if name.startswith("tag:"):
        return r.tags.get(name[4:]) in values
    if name == "tag-key":
        return any(v in r.tags for v in values)
    if name in FILTERS:
        return str(getattr(r, FILTERS[name])) in values
    raise EC2Error("InvalidParameterValue", f"The filter '{name}' is invalid")


# The middleware -------------------------------------------------------------------------------------------


class CapacityReservations:
    """WSGI middleware around moto's application serving EC2 capacity reservations (see the module docstring).

    ``backend(region)`` returns moto's in-process EC2 backend (its launch templates, subnets and instances).
    """

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        store: Store = STORE,
        backend: Callable[[str], Any] | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.backend = backend or _moto_backend

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if str(environ.get("PATH_INFO") or "").startswith("/moto-api"):
            return self.app(environ, start_response)
        scope = _CREDENTIAL_SCOPE.search(str(environ.get("HTTP_AUTHORIZATION") or ""))
        if scope is None or scope.group(2) != "ec2":
            return self.app(environ, start_response)
        region = scope.group(1)
        params = form(environ)
        action = params.get("Action", "")
        if action not in HANDLED:
            return self.app(environ, start_response)
        try:
            with self.store.lock:
                return self._handle(action, region, params, environ, start_response)
        except EC2Error as err:
            start_response("400 Bad Request", [("Content-Type", "text/xml")])
            return [_error(err.code, err.message)]

    def _handle(
        self,
        action: str,
        region: str,
        params: dict[str, str],
        environ: dict[str, Any],
        start_response: Callable[..., Any],
    ) -> Iterable[bytes]:
        reservations = self.store.region(region)
        if action == "CreateFleet":
            return self._create_fleet(region, reservations, params, environ, start_response)
        if action == "RunInstances":
            return self._run_instances(region, reservations, params, environ, start_response)
        if action == "TerminateInstances":
            return self._terminate(reservations, params, environ, start_response)
        if action == "CreateCapacityReservation":
            body = self._create(region, reservations, params)
        elif action == "CreateInterruptibleCapacityReservationAllocation":
            body = self._interruptible(reservations, params)
        elif action == "DescribeCapacityReservations":
            body = self._describe(region, reservations, params)
        else:
            body = self._cancel(region, reservations, params)
        start_response("200 OK", [("Content-Type", "text/xml")])
        return [_response(action, body)]

    # Reservations -----------------------------------------------------------------------------------------

    def _create(self, region: str, reservations: dict[str, Reservation], params: Mapping[str, str]) -> str:
        for required in ("InstanceType", "InstancePlatform", "InstanceCount"):
            if not params.get(required):
                raise EC2Error("MissingParameter", f"The request must contain the parameter {required}")
        zone = params.get("AvailabilityZone") or f"{region}a"
        count = int(params["InstanceCount"])
        criteria = params.get("InstanceMatchCriteria") or "open"
        if criteria not in ("open", "targeted"):
            raise EC2Error("InvalidParameterValue", f"Invalid value '{criteria}' for InstanceMatchCriteria")
        end = _parse_time(params["EndDate"]) if params.get("EndDate") else None
        r = Reservation(
            id="cr-" + secrets.token_hex(9)[:17],
            owner_id=_account(),
            instance_type=params["InstanceType"],
            platform=params["InstancePlatform"],
            zone=zone,
            zone_id=self._zone_id(region, zone),
            tenancy=params.get("Tenancy") or "default",
            total=count,
            available=count,
            match_criteria=criteria,
            tags=tag_specifications(params),
            created=datetime.now(UTC),
            end=end,
            end_date_type=params.get("EndDateType") or ("limited" if end else "unlimited"),
        )
        reservations[r.id] = r
        return f"<capacityReservation>{reservation_xml(r, region)}</capacityReservation>"

    def _interruptible(self, reservations: dict[str, Reservation], params: Mapping[str, str]) -> str:
        source = self._get(reservations, params.get("CapacityReservationId", ""))
        count = int(params.get("InstanceCount") or 0)
        if count <= 0 or count > source.available:
            raise EC2Error(
                "InvalidParameterValue",
                f"InstanceCount {count} exceeds the {source.available} available instances of {source.id}",
            )
        source.available -= count
        source.total -= count
        r = attrs.evolve(
            source,
            id="cr-" + secrets.token_hex(9)[:17],
            total=count,
            available=count,
            tags=tag_specifications(params),
            created=datetime.now(UTC),
            interruptible=True,
            instances=set(),
            returned=set(),
        )
        reservations[r.id] = r
        return "".join(
            (
                _element("sourceCapacityReservationId", source.id),
                _element("targetInstanceCount", count),
                _element("status", "active"),
                _element("interruptionType", "adhoc"),
            )
        )

    def _describe(self, region: str, reservations: dict[str, Reservation], params: Mapping[str, str]) -> str:
        ids = numbered(params, "CapacityReservationId")
        if ids and params.get("MaxResults"):
            raise EC2Error(
                "InvalidParameterCombination", "The parameter CapacityReservationIds cannot be used with MaxResults"
            )
        found = [self._get(reservations, i) for i in ids] if ids else sorted(reservations.values(), key=lambda r: r.id)
        for name, values in filters(params):
            found = [r for r in found if matches(r, name, values)]
        start = int(params.get("NextToken") or 0)
        size = int(params.get("MaxResults") or 1000)
        page = found[start : start + size]
        items = "".join(f"<item>{reservation_xml(r, region)}</item>" for r in page)
        token = _element("nextToken", start + size) if start + size < len(found) else ""
        return f"<capacityReservationSet>{items}</capacityReservationSet>{token}"

    def _cancel(self, region: str, reservations: dict[str, Reservation], params: Mapping[str, str]) -> str:
        """The reservation ends: its running instances go on as on-demand instances (no reservation any more)."""
        r = self._get(reservations, params.get("CapacityReservationId", ""))
        r.state = "cancelled"
        for instance_id in r.instances - r.returned:
            with contextlib.suppress(Exception):
                instance = self.backend(region).get_instance(instance_id)
                instance.capacity_reservation_id = None
                instance.capacity_reservation_specification = {"CapacityReservationPreference": "open"}
                instance.instance_lifecycle = None
        return _element("return", True)

    @staticmethod
    def _get(reservations: Mapping[str, Reservation], rid: str) -> Reservation:
        r = reservations.get(rid)
        if r is None:
            message = f"The capacity reservation ID '{rid}' does not exist"
            raise EC2Error("InvalidCapacityReservationId.NotFound", message)
        return r

    def _zone_id(self, region: str, zone: str) -> str:
        with contextlib.suppress(Exception):
            for z in self.backend(region).describe_availability_zones():
                if z.name == zone:
                    return str(z.zone_id)
        return ""

    # Launches ---------------------------------------------------------------------------------------------

    def _template_target(self, region: str, name: str | None, template_id: str | None, version: str | None) -> str:
        """The reservation a launch template (by name or id) targets ("" when none)."""
        backend = self.backend(region)
        try:
            template = (
                backend.get_launch_template(template_id) if template_id else backend.get_launch_template_by_name(name)
            )
        except Exception:
            return ""
        if version in (None, "", "$Latest"):
            data = template.latest_version().data
        elif version == "$Default":
            data = template.default_version().data
        else:
            data = template.get_version(version).data
        spec = data.get("CapacityReservationSpecification") or {}
        return str((spec.get("CapacityReservationTarget") or {}).get("CapacityReservationId") or "")

    def _usable(self, r: Reservation | None, rid: str, instance_type: str, zone: str) -> tuple[str, str] | None:
        """Why a launch of one ``instance_type`` in ``zone`` into ``rid`` fails: (code, message); None if it fits."""
        if r is None:
            return "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{rid}' does not exist"
        if r.state != "active":
            return "InvalidCapacityReservationState.Unavailable", f"The Capacity Reservation {rid} is {r.state}"
        if instance_type != r.instance_type or (zone and zone != r.zone):
            return (
                "InvalidParameterCombination",
                f"The instance type {instance_type} in {zone} does not match Capacity Reservation {rid} "
                f"({r.instance_type} in {r.zone})",
            )
        if r.available <= 0:
            return "ReservationCapacityExceeded", f"Insufficient capacity in the Capacity Reservation {rid}"
        return None

    def _create_fleet(
        self,
        region: str,
        reservations: dict[str, Reservation],
        params: dict[str, str],
        environ: dict[str, Any],
        start_response: Callable[..., Any],
    ) -> Iterable[bytes]:
        prefix = "LaunchTemplateConfigs.1"
        spec = f"{prefix}.LaunchTemplateSpecification"
        rid = self._template_target(
            region,
            params.get(f"{spec}.LaunchTemplateName"),
            params.get(f"{spec}.LaunchTemplateId"),
            params.get(f"{spec}.Version"),
        )
        if not rid:
            return self.app(environ, start_response)
        r = reservations.get(rid)
        instance_type = params.get(f"{prefix}.Overrides.1.InstanceType", "")
        subnet = params.get(f"{prefix}.Overrides.1.SubnetId", "")
        zone = params.get(f"{prefix}.Overrides.1.AvailabilityZone") or self._subnet_zone(region, subnet)
        failure = self._usable(r, rid, instance_type, zone)
        if failure is not None:
            code, message = failure
            overrides = "".join(
                (
                    _element("instanceType", instance_type),
                    _element("subnetId", subnet or None),
                    _element("availabilityZone", zone),
                )
            )
            template = "".join(
                (
                    _element("launchTemplateName", params.get(f"{spec}.LaunchTemplateName")),
                    _element("launchTemplateId", params.get(f"{spec}.LaunchTemplateId")),
                    _element("version", params.get(f"{spec}.Version")),
                )
            )
            error = (
                f"<item><launchTemplateAndOverrides><launchTemplateSpecification>{template}"
                f"</launchTemplateSpecification><overrides>{overrides}</overrides></launchTemplateAndOverrides>"
                f"{_element('lifecycle', 'on-demand')}{_element('errorCode', code)}{_element('errorMessage', message)}"
                "</item>"
            )
            body = f"{_element('fleetId', 'fleet-' + str(uuid.uuid4()))}<errorSet>{error}</errorSet><fleetInstanceSet/>"
            start_response("200 OK", [("Content-Type", "text/xml")])
            return [_response("CreateFleet", body)]
        assert r is not None
        target = "TargetCapacitySpecification.DefaultTargetCapacityType"
        if params.get(target) in ("capacity-block", "reserved-capacity"):  # moto launches on-demand and spot only
            params = {k: v for k, v in params.items() if not k.startswith("ReservedCapacityOptions.")}
            params[target] = "on-demand"
            replace_form(environ, params)
        return self._launched(region, r, environ, start_response, "instanceIds")

    def _run_instances(
        self,
        region: str,
        reservations: dict[str, Reservation],
        params: dict[str, str],
        environ: dict[str, Any],
        start_response: Callable[..., Any],
    ) -> Iterable[bytes]:
        rid = params.get("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId", "")
        by_template = params.get("LaunchTemplate.LaunchTemplateName") or params.get("LaunchTemplate.LaunchTemplateId")
        if not rid and by_template:
            rid = self._template_target(
                region,
                params.get("LaunchTemplate.LaunchTemplateName"),
                params.get("LaunchTemplate.LaunchTemplateId"),
                params.get("LaunchTemplate.Version"),
            )
        if not rid:
            return self.app(environ, start_response)
        r = reservations.get(rid)
        instance_type = params.get("InstanceType") or (r.instance_type if r else "")
        zone = params.get("Placement.AvailabilityZone") or self._subnet_zone(region, params.get("SubnetId", ""))
        failure = self._usable(r, rid, instance_type, zone)
        if failure is None and r is not None and r.available < int(params.get("MinCount") or 1):
            failure = ("ReservationCapacityExceeded", f"Insufficient capacity in the Capacity Reservation {rid}")
        if failure is not None:
            raise EC2Error(*failure)
        assert r is not None
        return self._launched(region, r, environ, start_response, "instanceId")

    def _launched(
        self, region: str, r: Reservation, environ: dict[str, Any], start_response: Callable[..., Any], tag: str
    ) -> Iterable[bytes]:
        """Pass the launch to moto, then take each instance it launched from ``r``."""
        status: list[Any] = []

        def capture(code: str, headers: Any, *rest: Any) -> Any:
            status.append((code, headers, *rest))
            return lambda _data: None

        body = b"".join(self.app(environ, capture))
        code, headers, *rest = status[0]
        if code.startswith("200"):
            for instance_id in _instance_ids(body, tag):
                self._take(region, r, instance_id)
        start_response(code, headers, *rest)
        return [body]

    def _take(self, region: str, r: Reservation, instance_id: str) -> None:
        r.available = max(0, r.available - 1)
        r.instances.add(instance_id)
        with contextlib.suppress(Exception):
            instance = self.backend(region).get_instance(instance_id)
            instance.capacity_reservation_id = r.id
            instance.capacity_reservation_specification = {
                "CapacityReservationPreference": "capacity-reservations-only",
                "CapacityReservationTarget": {"CapacityReservationId": r.id},
            }
            if r.interruptible:
                instance.instance_lifecycle = "interruptible-capacity-reservation"
            elif r.reservation_type == "capacity-block":
                instance.instance_lifecycle = "capacity-block"

    def _terminate(
        self,
        reservations: dict[str, Reservation],
        params: Mapping[str, str],
        environ: dict[str, Any],
        start_response: Callable[..., Any],
    ) -> Iterable[bytes]:
        status: list[Any] = []

        def capture(code: str, headers: Any, *rest: Any) -> Any:
            status.append((code, headers, *rest))
            return lambda _data: None

        body = b"".join(self.app(environ, capture))
        code, headers, *rest = status[0]
        if code.startswith("200"):
            for instance_id in numbered(params, "InstanceId"):
                for r in reservations.values():
                    if instance_id in r.instances and instance_id not in r.returned:
                        r.returned.add(instance_id)
                        if r.state == "active":
                            r.available = min(r.total, r.available + 1)
        start_response(code, headers, *rest)
        return [body]

    def _subnet_zone(self, region: str, subnet_id: str) -> str:
        if not subnet_id:
            return ""
        with contextlib.suppress(Exception):
            return str(self.backend(region).get_subnet(subnet_id).availability_zone)
        return ""


def _instance_ids(body: bytes, tag: str) -> list[str]:
    """Instance ids of a CreateFleet (``instanceIds/item``) or RunInstances (``instanceId``) answer (element names
    compared without their namespace)."""

    def local(element: ET.Element) -> str:
        return element.tag.rsplit("}", 1)[-1]

    root = ET.fromstring(body)
    if tag == "instanceIds":
        return [str(i.text) for ids in root.iter() if local(ids) == "instanceIds" for i in ids if local(i) == "item"]
    return [str(e.text) for e in root.iter() if local(e) == "instanceId"]


def _account() -> str:
    from moto.core import DEFAULT_ACCOUNT_ID

    return str(DEFAULT_ACCOUNT_ID)


def _moto_backend(region: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[_account()][region]


def seed_capacity_block(
    region: str, instance_type: str, zone: str, count: int, end: datetime, tags: Mapping[str, str], store: Store = STORE
) -> str:
    """A capacity block (``reservationType: capacity-block``, ``targeted``) written into this process's store: EC2
    sells them through ``PurchaseCapacityBlock`` offerings, which this module does not serve. Returns its id."""
    r = Reservation(
        id="cr-" + secrets.token_hex(9)[:17],
        owner_id=_account(),
        instance_type=instance_type,
        platform="Linux/UNIX",
        zone=zone,
        zone_id="",
        tenancy="default",
        total=count,
        available=count,
        match_criteria="targeted",
        tags=dict(tags),
        created=datetime.now(UTC),
        end=end,
        end_date_type="limited",
        reservation_type="capacity-block",
    )
    with store.lock:
        store.region(region)[r.id] = r
    return r.id


def reset(store: Store = STORE) -> None:
    """Forget every reservation (tests)."""
    with store.lock:
        store.regions.clear()
