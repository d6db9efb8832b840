"""moto's AWS server on loopback, seeded with what a Karpenter cluster needs.

``start_moto()`` runs ``moto.server.ThreadedMotoServer`` on 127.0.0.1 (port 0 = a free port) in this process;
``seed_cluster()`` creates, for one cluster name: a VPC 10.0.0.0/16, three subnets (us-east-1a/b/c) and a
security group tagged ``karpenter.sh/discovery=<cluster>``, the IAM role ``KarpenterNodeRole-<cluster>``, and
AL2023 EKS AMIs (x86_64 and arm64) published under the public SSM parameters
``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/standard/recommended/image_id`` (and the
versioned ``…/amazon-eks-node-al2023-<arch>-standard-<k8s>-v20250101/image_id``), and the SQS queue
``<cluster>-interruption`` for ``INTERRUPTION_QUEUE``.

moto refuses ``PutParameter`` under ``/aws/service/`` and its RegisterImage takes no architecture, so those two
are written through moto's in-process backends: ``seed_cluster`` must run in the process that started the
server. Spot prices cannot be seeded: moto answers DescribeSpotPriceHistory with a fixed ``0.00001`` for every
offered (type, zone).
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import Any

import boto3

AWS_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}
AMI_VERSION = "v20250101"
ZONE_SUFFIXES = ("a", "b", "c")
DISCOVERY_TAG = "karpenter.sh/discovery"


class MotoAWS:
    """A running ThreadedMotoServer; ``endpoint_url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, server: Any, endpoint_url: str) -> None:
        self._server = server
        self.endpoint_url = endpoint_url

    def stop(self) -> None:
        """Shut the server down (its in-process state stays until the process exits)."""
        self._server.stop()


def start_moto(port: int = 0) -> MotoAWS:
    """Start moto's server on 127.0.0.1:``port`` (0 = any free port) in a daemon thread."""
    from moto.server import ThreadedMotoServer

    for name in ("werkzeug", "moto"):
        # werkzeug logs a traceback per request moto has no backend for (e.g. the Pricing API karpy tries once).
        logging.getLogger(name).setLevel(logging.CRITICAL)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    return MotoAWS(server, f"http://{host}:{bound}")


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


def _seed_amis(ec2: Any, k8s_version: str, region: str) -> dict[str, str]:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ssm.models import Parameter, ssm_backends

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    ssm = ssm_backends[DEFAULT_ACCOUNT_ID][region]
    out = {}
    for arch in ("x86_64", "arm64"):
        name = f"amazon-eks-node-al2023-{arch}-standard-{k8s_version}-{AMI_VERSION}"
        images = ec2.describe_images(Filters=[{"Name": "name", "Values": [name]}], Owners=["self"])["Images"]
        if images:
            image_id = images[0]["ImageId"]
        else:
            image_id = ec2.register_image(Name=name, Description=f"EKS Kubernetes Worker AMI AL2023 {arch}")["ImageId"]
            ami = backend.amis[image_id]  # RegisterImage in moto ignores these fields
            ami.architecture = arch
            ami.virtualization_type = "hvm"
            ami.root_device_name = "/dev/xvda"
            ami.creation_date = datetime(2025, 1, 1, tzinfo=UTC)
            ec2.create_tags(Resources=[image_id], Tags=[{"Key": "Name", "Value": name}])
        base = f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/standard"
        for path in (f"{base}/recommended/image_id", f"{base}/{name}/image_id"):
            versions = ssm._parameters[path]
            if versions and versions[-1].value == image_id:
                continue
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
        out[arch] = image_id
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
    ``{"vpc_id", "subnet_ids": {zone: id}, "security_group_id", "role_name", "ami_ids": {arch: id},
    "interruption_queue", "interruption_queue_url"}`` (the SQS queue ``<cluster>-interruption``)."""
    ec2 = _client("ec2", endpoint_url, region)
    iam = _client("iam", endpoint_url, region)
    seeded = _seed_network(ec2, cluster_name, region)
    seeded["role_name"] = _seed_role(iam, cluster_name)
    seeded["ami_ids"] = _seed_amis(ec2, k8s_version, region)
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
