"""moto's AWS server on loopback, seeded with what a Karpenter cluster needs.

``start_moto()`` runs ``moto.server.ThreadedMotoServer`` on 127.0.0.1 (port 0 = a free port) in this process;
``seed_cluster()`` creates, for one cluster name: a VPC 10.0.0.0/16, three subnets (us-east-1a/b/c) and a
security group tagged ``karpenter.sh/discovery=<cluster>``, the IAM role ``KarpenterNodeRole-<cluster>``, the
AMIs of every family Karpenter resolves aliases for, published under the public SSM parameters Karpenter reads
(``seed_amis``: AL2023 standard/nvidia/neuron, AL2 standard/arm64/GPU, Bottlerocket standard and nvidia on
x86_64 and arm64, EKS-optimized Windows Server Core 2019/2022/2025; see :func:`seed_images`), an in-house
"custom" AMI of another account with no SSM parameter (:func:`custom_image`), and the SQS queue
``<cluster>-interruption`` for ``INTERRUPTION_QUEUE``.

moto refuses ``PutParameter`` under ``/aws/service/`` and its RegisterImage takes no architecture, platform,
owner or creation date, so those are written through moto's in-process backends: ``seed_cluster`` must run in
the process that started the server. The AWS-published AMIs are owned by moto's own account (``self``), not
Amazon's (Karpenter's default owners for a name term, ``self`` and ``amazon``, find them either way). Spot prices
cannot be seeded: moto answers DescribeSpotPriceHistory with a fixed ``0.00001`` for every offered (type, zone).

``start_moto(request_log=PATH)`` also appends every mutating AWS request (:class:`RequestLog`: any Action but
``Describe*``/``Get*``/``List*``) to a JSONL file with its arrival time and User-Agent, which karpy's AWS clients
stamp with the process's leader-election identity: the failover e2e attributes AWS writes to processes with it.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import boto3

AWS_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}
AMI_VERSION = "v20250101"
BOTTLEROCKET_VERSION = "1.49.0"
WINDOWS_YEARS = ("2019", "2022", "2025")
CUSTOM_AMI_NAME = "acme-golden-al2023-x86_64-2025.01.01"
CUSTOM_AMI_OWNER = "111122223333"
CUSTOM_AMI_TAGS = {"acme.io/image": "golden", "acme.io/team": "platform"}
ZONE_SUFFIXES = ("a", "b", "c")
DISCOVERY_TAG = "karpenter.sh/discovery"


READ_ACTION_PREFIXES = ("Describe", "Get", "List")
_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")


def is_read_action(action: str) -> bool:
    """True for the AWS Actions that change nothing (``Describe*``, ``Get*``, ``List*``). Everything else
    mutates, ``ReceiveMessage`` included: it hides a message from every other consumer for its visibility
    timeout."""
    return action.startswith(READ_ACTION_PREFIXES)


def request_action(environ: dict[str, Any]) -> str:
    """The AWS Action of a WSGI request: the ``X-Amz-Target`` operation (JSON protocols: SQS, SSM, Pricing), the
    ``Action`` of the query string or of the form body (query protocols: EC2, IAM, STS), else ``"<METHOD>
    <path>"`` for REST protocols (EKS) — ``GET``/``HEAD`` of those read, so they get ``Get <path>``. A form body
    read here is put back in ``wsgi.input`` for moto."""
    if target := environ.get("HTTP_X_AMZ_TARGET"):
        return str(target).rsplit(".", 1)[-1]
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING") or "")
    if "Action" in query:
        return str(query["Action"][0])
    if str(environ.get("CONTENT_TYPE") or "").startswith("application/x-www-form-urlencoded"):
        with contextlib.suppress(ValueError):
            size = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(size) if size else b""
            environ["wsgi.input"] = io.BytesIO(body)
            if action := urllib.parse.parse_qs(body.decode(errors="replace")).get("Action"):
                return str(action[0])
    method = str(environ.get("REQUEST_METHOD") or "GET")
    path = str(environ.get("PATH_INFO") or "/")
    return f"Get {path}" if method in ("GET", "HEAD") else f"{method} {path}"


class RequestLog:
    """WSGI middleware around moto's application: every mutating request (:func:`is_read_action` false) is
    appended to ``path`` as one JSON line ``{"t", "t_end", "service", "action", "user_agent", "status"}`` — ``t``
    the arrival time and ``t_end`` the answer's (``time.time()``, seconds), ``service`` the SigV4 credential
    scope's service, ``status`` the HTTP status moto answered. moto's own API (``/moto-api/``) is not logged.
    Thread-safe (moto's server is threaded)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], path: Path) -> None:
        self.app = app
        self.path = path
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        arrived = time.time()
        if str(environ.get("PATH_INFO") or "").startswith("/moto-api"):
            return self.app(environ, start_response)
        action = request_action(environ)
        if is_read_action(action):
            return self.app(environ, start_response)
        status: list[str] = []

        def recording_start_response(code: str, headers: Any, *rest: Any) -> Any:
            status.append(code)
            return start_response(code, headers, *rest)

        try:
            return self.app(environ, recording_start_response)
        finally:
            scope = _CREDENTIAL_SCOPE.search(str(environ.get("HTTP_AUTHORIZATION") or ""))
            record = {
                "t": arrived,
                "t_end": time.time(),
                "service": scope.group(1) if scope else "",
                "action": action,
                "user_agent": str(environ.get("HTTP_USER_AGENT") or ""),
                "status": int(status[0].split()[0]) if status else 0,
            }
            with self._lock, self.path.open("a") as out:
                out.write(json.dumps(record) + "\n")


class MotoAWS:
    """A running ThreadedMotoServer; ``endpoint_url`` is ``http://127.0.0.1:<port>``; ``request_log`` is the
    JSONL file of its mutating requests (:class:`RequestLog`; None when not logged)."""

    def __init__(self, server: Any, endpoint_url: str, request_log: Path | None = None) -> None:
        self._server = server
        self.endpoint_url = endpoint_url
        self.request_log = request_log

    def stop(self) -> None:
        """Shut the server down (its in-process state stays until the process exits)."""
        self._server.stop()


def _spot_fleets_honour_security_group_ids() -> None:
    """Work around a moto deviation, in the test environment only: moto's CreateFleet builds each spot launch
    specification from the launch template's ``GroupSet`` alone, so a spot instance launched from a template that
    names its security groups by ``SecurityGroupIds`` (as Karpenter's and karpy's templates do) gets the VPC's
    default group, and its NodeClaim is then rightly judged ``SecurityGroupDrift`` and replaced. EC2 launches it
    with the template's groups; so does moto after this patch (on-demand instances already do). Idempotent."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends, fleets

    if getattr(fleets.SpotFleetLaunchSpec, "karpy_patched", False):
        return

    class LaunchSpec(fleets.SpotFleetLaunchSpec):
        karpy_patched = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            spec = kwargs.get("launch_template_spec") or {}
            if not kwargs.get("group_set") and spec.get("LaunchTemplateId"):
                backend = ec2_backends[DEFAULT_ACCOUNT_ID][AWS_ENV["AWS_REGION"]]
                template = backend.get_launch_template(spec["LaunchTemplateId"])
                data = template.get_version(spec.get("Version") or template.default_version_number).data
                kwargs["group_set"] = list(data.get("SecurityGroupId") or data.get("SecurityGroupIds") or [])
            super().__init__(*args, **kwargs)

    fleets.SpotFleetLaunchSpec = LaunchSpec


def _ec2_extensions(app: Any) -> Any:
    """moto's application wrapped in the test environment's implementations of the EC2 APIs moto lacks:
    placement groups (:mod:`e2e.cluster.placementgroups`) and capacity reservations
    (:mod:`e2e.cluster.capacityreservations`)."""
    from e2e.cluster.capacityreservations import CapacityReservations
    from e2e.cluster.placementgroups import PlacementGroupsAPI

    return PlacementGroupsAPI(CapacityReservations(app))


def _logged_server(request_log: Path | None, ip_address: str, port: int) -> Any:
    """A ThreadedMotoServer whose WSGI application is wrapped in :func:`_ec2_extensions` and, with a
    ``request_log``, :class:`RequestLog` (moto 5's ``ThreadedMotoServer._server_entry``, with the wrappers around
    ``DomainDispatcherApplication``)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from moto.server import ThreadedMotoServer
    from werkzeug.serving import make_server

    class LoggedMotoServer(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = _ec2_extensions(DomainDispatcherApplication(create_backend_app))
            if request_log is not None:
                app = RequestLog(app, request_log)
            self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    return LoggedMotoServer(ip_address=ip_address, port=port, verbose=False)


def start_moto(port: int = 0, request_log: Path | None = None) -> MotoAWS:
    """Start moto's server on 127.0.0.1:``port`` (0 = any free port) in a daemon thread; with ``request_log``,
    its mutating requests are appended to that JSONL file (:class:`RequestLog`)."""
    from e2e.cluster.motofast import patch_moto_fleet_instance_tags, patch_moto_query_parser, patch_moto_tags
    from e2e.cluster.motopages import patch_moto_instance_type_pages
    from e2e.cluster.placementgroups import patch_moto_fleets

    _spot_fleets_honour_security_group_ids()
    patch_moto_fleets()
    patch_moto_tags()
    patch_moto_query_parser()
    patch_moto_fleet_instance_tags()  # after patch_moto_fleets: extends its Fleet
    patch_moto_instance_type_pages()

    for name in ("werkzeug", "moto"):
        # werkzeug logs a traceback per request moto has no backend for (e.g. the Pricing API karpy tries once).
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if request_log is not None:
        request_log.touch()
    server = _logged_server(request_log, "127.0.0.1", port)
    server.start()
    host, bound = server.get_host_and_port()
    return MotoAWS(server, f"http://{host}:{bound}", request_log)


def _client(service: str, endpoint_url: str, region: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def _tags(cluster_name: str, name: str) -> list[dict[str, str]]:
    return [{"Key": DISCOVERY_TAG, "Value": cluster_name}, {"Key": "Name", "Value": name}]


def _by_tag(items: list[dict[str, Any]], cluster_name: str) -> list[dict[str, Any]]:
    return [i for i in items if {"Key": DISCOVERY_TAG, "Value": cluster_name} in (i.get("Tags") or [])]


def _seed_network(ec2: Any, cluster_name: str, region: str) -> dict[str, Any]:
    vpcs = _by_tag(
        ec2.describe_vpcs(Filters=[{"Name": f"tag:{DISCOVERY_TAG}", "Values": [cluster_name]}])["Vpcs"], cluster_name
    )
    if vpcs:
        vpc_id = vpcs[0]["VpcId"]
    else:
        vpc_id = ec2.create_vpc(
            CidrBlock="10.0.0.0/16",
            TagSpecifications=[{"ResourceType": "vpc", "Tags": _tags(cluster_name, cluster_name)}],
        )["Vpc"]["VpcId"]
    existing = {
        s["AvailabilityZone"]: s["SubnetId"]
        for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]
    }
    subnets = {}
    for index, suffix in enumerate(ZONE_SUFFIXES):
        zone = f"{region}{suffix}"
        if zone not in existing:
            existing[zone] = ec2.create_subnet(
                VpcId=vpc_id,
                CidrBlock=f"10.0.{index * 32}.0/19",
                AvailabilityZone=zone,
                TagSpecifications=[
                    {"ResourceType": "subnet", "Tags": _tags(cluster_name, f"{cluster_name}-private-{zone}")}
                ],
            )["Subnet"]["SubnetId"]
        subnets[zone] = existing[zone]
    group_name = f"{cluster_name}-node"
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "group-name", "Values": [group_name]}]
    )["SecurityGroups"]
    if groups:
        sg_id = groups[0]["GroupId"]
    else:
        sg_id = ec2.create_security_group(
            GroupName=group_name,
            Description=f"nodes of {cluster_name}",
            VpcId=vpc_id,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": _tags(cluster_name, group_name)}],
        )["GroupId"]
    return {"vpc_id": vpc_id, "subnet_ids": subnets, "security_group_id": sg_id}


def _seed_role(iam: Any, cluster_name: str) -> str:
    role = f"KarpenterNodeRole-{cluster_name}"
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(trust))
    return role


@attrs.frozen
class SeedImage:
    """One AMI the local AWS publishes: its name, architecture, platform ("" or "windows"), the SSM parameters
    naming it, its owner account ("" = moto's own, as ``self``), tags and creation date."""

    name: str
    arch: str
    parameters: tuple[str, ...] = ()
    platform: str = ""
    owner: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    created: datetime = datetime(2025, 1, 1, tzinfo=UTC)


def _eks(k8s: str) -> str:
    return f"/aws/service/eks/optimized-ami/{k8s}"


def _al2023_images(k8s: str) -> list[SeedImage]:
    """AL2023 standard (latest and pinned), nvidia and neuron (pinned only: ``al2023@latest`` keeps resolving
    to the standard AMIs alone, which the launch-failure tests rely on). The arm64 image is a minute newer, so
    ``status.amis`` (newest first) lists it first."""
    out = []
    for arch, variant in (
        ("x86_64", "standard"),
        ("arm64", "standard"),
        ("x86_64", "nvidia"),
        ("arm64", "nvidia"),
        ("x86_64", "neuron"),
    ):
        name = f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{AMI_VERSION}"
        base = f"{_eks(k8s)}/amazon-linux-2023/{arch}/{variant}"
        params = (f"{base}/{name}/image_id",) + ((f"{base}/recommended/image_id",) if variant == "standard" else ())
        created = datetime(2025, 1, 1, 0, 1 if arch == "arm64" else 0, tzinfo=UTC)
        out.append(SeedImage(name, arch, params, created=created))
    return out


def _al2_images(k8s: str) -> list[SeedImage]:
    """AL2: x86_64, arm64 and the GPU image (Karpenter's nvidia and neuron AMI), latest and pinned."""
    out = []
    for arch, path, prefix in (
        ("x86_64", "amazon-linux-2", "amazon-eks-node"),
        ("arm64", "amazon-linux-2-arm64", "amazon-eks-arm64-node"),
        ("x86_64", "amazon-linux-2-gpu", "amazon-eks-gpu-node"),
    ):
        name = f"{prefix}-{k8s}-{AMI_VERSION}"
        out.append(
            SeedImage(name, arch, (f"{_eks(k8s)}/{path}/recommended/image_id", f"{_eks(k8s)}/{path}/{name}/image_id"))
        )
    return out


def _bottlerocket_images(k8s: str) -> list[SeedImage]:
    """Bottlerocket standard and nvidia, x86_64 and arm64, latest and pinned (``BOTTLEROCKET_VERSION``)."""
    out = []
    for flavour in ("", "-nvidia"):
        for arch in ("x86_64", "arm64"):
            root = f"/aws/service/bottlerocket/aws-k8s-{k8s}{flavour}/{arch}"
            name = f"bottlerocket-aws-k8s-{k8s}{flavour}-{arch}-v{BOTTLEROCKET_VERSION}-4ce1a5b2"
            out.append(SeedImage(name, arch, (f"{root}/latest/image_id", f"{root}/{BOTTLEROCKET_VERSION}/image_id")))
    return out


def _windows_images(k8s: str) -> list[SeedImage]:
    """EKS-optimized Windows Server Core 2019/2022/2025 (x86_64, platform windows), latest only as AWS has it."""
    out = []
    for year in WINDOWS_YEARS:
        base = f"Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}"
        param = f"/aws/service/ami-windows-latest/{base}/image_id"
        out.append(SeedImage(f"{base}-2025.01.01", "x86_64", (param,), platform="windows"))
    return out


def custom_image() -> SeedImage:
    """An in-house AMI: no SSM parameter, a non-EKS name, another account's, tagged (amiSelectorTerms by id, by
    name + owner, by tags; a name without owner does not find it: Karpenter's owners default to self, amazon)."""
    return SeedImage(CUSTOM_AMI_NAME, "x86_64", owner=CUSTOM_AMI_OWNER, tags=tuple(sorted(CUSTOM_AMI_TAGS.items())))


def seed_images(k8s_version: str) -> list[SeedImage]:
    """Every AMI :func:`seed_amis` publishes for ``k8s_version``, AL2023 standard first (tests that take "any
    self-owned image" get an AL2023 one)."""
    return [
        *_al2023_images(k8s_version),
        *_al2_images(k8s_version),
        *_bottlerocket_images(k8s_version),
        *_windows_images(k8s_version),
        custom_image(),
    ]


def _publish(ssm: Any, path: str, image_id: str) -> None:
    """Put ``image_id`` under the public SSM parameter ``path`` (moto refuses PutParameter under /aws/service)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import Parameter

    versions = ssm._parameters[path]
    if versions and versions[-1].value == image_id:
        return
    versions.append(
        Parameter(
            account_id=DEFAULT_ACCOUNT_ID,
            name=path,
            value=image_id,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=datetime.now(UTC),
            version=len(versions) + 1,
            data_type="aws:ec2:image",
        )
    )


def _register(ec2: Any, backend: Any, image: SeedImage) -> str:
    """The id of ``image`` in moto, registering it the first time (idempotent by name)."""
    found = ec2.describe_images(Filters=[{"Name": "name", "Values": [image.name]}])["Images"]
    if found:
        return str(found[0]["ImageId"])
    image_id = str(ec2.register_image(Name=image.name, Description=image.name)["ImageId"])
    ami = backend.amis[image_id]  # RegisterImage in moto ignores these fields
    ami.architecture = image.arch
    ami.virtualization_type = "hvm"
    ami.root_device_name = "/dev/sda1" if image.platform == "windows" else "/dev/xvda"
    ami.creation_date = image.created
    ami.platform = image.platform or None
    if image.owner:
        ami.owner_id = image.owner
    tags = [{"Key": "Name", "Value": image.name}, *({"Key": k, "Value": v} for k, v in image.tags)]
    ec2.create_tags(Resources=[image_id], Tags=tags)
    return image_id


def seed_amis(endpoint_url: str, k8s_version: str, region: str = "us-east-1") -> dict[str, str]:
    """Register every :func:`seed_images` AMI for ``k8s_version`` in moto and publish its SSM parameters
    (idempotent; runs in the process that started moto). Returns {image name: id}."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ssm.models import ssm_backends

    ec2 = _client("ec2", endpoint_url, region)
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    ssm = ssm_backends[DEFAULT_ACCOUNT_ID][region]
    out = {}
    for image in seed_images(k8s_version):
        out[image.name] = _register(ec2, backend, image)
        for path in image.parameters:
            _publish(ssm, path, out[image.name])
    return out


def interruption_queue_name(cluster_name: str) -> str:
    """The SQS queue ``seed_cluster`` creates for interruption events (``INTERRUPTION_QUEUE``)."""
    return f"{cluster_name}-interruption"


def _seed_queue(sqs: Any, cluster_name: str) -> tuple[str, str]:
    """The interruption queue as Karpenter's CloudFormation makes it (5-minute retention); (name, url)."""
    name = interruption_queue_name(cluster_name)
    url = sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "300"})["QueueUrl"]
    return name, str(url)


def seed_cluster(
    endpoint_url: str, cluster_name: str, k8s_version: str = "1.34", region: str = "us-east-1"
) -> dict[str, Any]:
    """Seed moto for ``cluster_name`` (idempotent: existing resources are reused) and return their ids:
    ``{"vpc_id", "subnet_ids": {zone: id}, "security_group_id", "role_name", "images": {AMI name: id},
    "ami_ids": {arch: id of the AL2023 standard AMI}, "interruption_queue", "interruption_queue_url"}`` (the SQS
    queue ``<cluster>-interruption``)."""
    ec2 = _client("ec2", endpoint_url, region)
    iam = _client("iam", endpoint_url, region)
    seeded = _seed_network(ec2, cluster_name, region)
    seeded["role_name"] = _seed_role(iam, cluster_name)
    seeded["images"] = seed_amis(endpoint_url, k8s_version, region)
    seeded["ami_ids"] = {
        arch: seeded["images"][f"amazon-eks-node-al2023-{arch}-standard-{k8s_version}-{AMI_VERSION}"]
        for arch in ("x86_64", "arm64")
    }
    seeded["interruption_queue"], seeded["interruption_queue_url"] = _seed_queue(
        _client("sqs", endpoint_url, region), cluster_name
    )
    return seeded


def seed_eks_cluster(
    endpoint_url: str,
    cluster_name: str,
    server: str,
    ca_data: str,
    k8s_version: str = "1.34",
    region: str = "us-east-1",
) -> dict[str, Any]:
    """An EKS cluster ``cluster_name`` in moto whose ``DescribeCluster`` answers the local apiserver's endpoint
    ``server`` and CA ``ca_data`` (base64 PEM), for karpy's cluster discovery (``CLUSTER_ENDPOINT`` unset, a
    kubeconfig without CA data), as Karpenter discovers them on EKS. Idempotent; returns DescribeCluster's
    ``cluster``.

    moto's CreateCluster makes up a random endpoint and CA, so both are set through moto's in-process backend:
    like ``seed_cluster``, this must run in the process that started the server.
    """
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.eks.models import eks_backends

    eks = _client("eks", endpoint_url, region)
    if cluster_name not in eks.list_clusters()["clusters"]:
        eks.create_cluster(
            name=cluster_name,
            version=k8s_version,
            roleArn=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/{cluster_name}-eks-cluster",
            resourcesVpcConfig={},
        )
    cluster = eks_backends[DEFAULT_ACCOUNT_ID][region].clusters[cluster_name]
    cluster.endpoint = server
    cluster.certificate_authority = {"data": ca_data}
    return dict(eks.describe_cluster(name=cluster_name)["cluster"])
