"""AL2023 nodeadm user data rendering (pure), in Karpenter v1.15's form."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from e2e.cluster import kubelet as node_agent
from karpy.aws import amifamily
from karpy.aws.instancetypes import kubelet_resources
from karpy.aws.launchtemplates import LaunchTemplateProvider, block_device_mappings, node_labels
from karpy.aws.userdata import NodeAdmInput, custom_parts, format_taint, parse_flags, parse_node_config, render
from karpy.cloudprovider.types import LaunchRequest


def node_input(**overrides: Any) -> NodeAdmInput:
    values: dict[str, Any] = {
        "cluster_name": "demo",
        "endpoint": "https://127.0.0.1:6443",
        "ca_bundle": "Q0E=",
        "max_pods": 29,
        "kube_reserved": {"cpu": "70m", "memory": "574Mi", "ephemeral-storage": "1Gi"},
        "system_reserved": {},
        "eviction_hard": {"memory.available": "100Mi", "nodefs.available": "10%"},
        "labels": {"karpenter.sh/nodepool": "default", "team": "a"},
        "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
    }
    values.update(overrides)
    return NodeAdmInput(**values)


def test_renders_a_mime_document_with_one_nodeconfig_part() -> None:
    """Boundary ``//``, one application/node.eks.aws part, closing delimiter."""
    text = render(node_input())
    assert text.startswith('MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="//"\n')
    assert text.count("\n--//\n") == 1
    assert text.rstrip().endswith("--//--")
    assert [ct for ct, _ in custom_parts(text)] == ["application/node.eks.aws"]


def test_nodeconfig_carries_cluster_kubelet_config_and_flags() -> None:
    """Cluster block, explicit maxPods/kubeReserved/evictionHard (an empty systemReserved is left out, as
    Karpenter v1.15 leaves out reservations it was not given), labels as a Go-quoted flag and taints in the
    kubelet config's ``registerWithTaints`` (Karpenter v1.15's ``generateInlineKubeletConfiguration``)."""
    doc = parse_node_config(render(node_input()))
    assert doc["apiVersion"] == "node.eks.aws/v1alpha1"
    assert doc["spec"]["cluster"] == {
        "name": "demo",
        "apiServerEndpoint": "https://127.0.0.1:6443",
        "certificateAuthority": "Q0E=",
        "cidr": "10.100.0.0/16",
    }
    config = doc["spec"]["kubelet"]["config"]
    assert config["maxPods"] == 29
    assert config["kubeReserved"] == {"cpu": "70m", "memory": "574Mi", "ephemeral-storage": "1Gi"}
    assert "systemReserved" not in config
    assert config["evictionHard"] == {"memory.available": "100Mi", "nodefs.available": "10%"}
    assert config["clusterDNS"] == ["10.100.0.10"]
    assert doc["spec"]["kubelet"]["flags"] == ['--node-labels="karpenter.sh/nodepool=default,team=a"']
    assert config["registerWithTaints"] == [
        {"effect": "NoSchedule", "key": "dedicated", "value": "gpu"},
        {"effect": "NoExecute", "key": "karpenter.sh/unregistered"},
    ]
    labels, taints = parse_flags(doc)
    assert labels == {"karpenter.sh/nodepool": "default", "team": "a"}
    assert taints == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
    ]


def test_unregistered_taint_is_not_duplicated_and_valueless_taints_format() -> None:
    """A taint without value renders ``key:Effect``; the unregistered taint appears once."""
    assert format_taint({"key": "a", "effect": "NoExecute"}) == "a:NoExecute"
    text = render(node_input(taints=[{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]))
    config = parse_node_config(text)["spec"]["kubelet"]["config"]
    assert config["registerWithTaints"] == [{"effect": "NoExecute", "key": "karpenter.sh/unregistered"}]


def test_nodeclass_kubelet_fields_pass_through_and_cluster_dns_wins() -> None:
    """Keys karpy does not compute are passed through; ``clusterDNS`` from the NodeClass replaces the default."""
    text = render(node_input(kubelet={"clusterDNS": ["10.0.0.10"], "imageGCHighThresholdPercent": 85, "maxPods": 7}))
    config = parse_node_config(text)["spec"]["kubelet"]["config"]
    assert config["clusterDNS"] == ["10.0.0.10"]
    assert config["imageGCHighThresholdPercent"] == 85
    assert config["maxPods"] == 29  # the computed value (already derived from kubelet.maxPods by the caller)


def test_shell_script_user_data_goes_first() -> None:
    """A plain shell script becomes a text/x-shellscript part before karpy's NodeConfig."""
    text = render(node_input(custom_user_data="#!/bin/bash\necho hello\n"))
    parts = custom_parts(text)
    assert [ct for ct, _ in parts] == ["text/x-shellscript", "application/node.eks.aws"]
    assert parts[0][1].strip() == "#!/bin/bash\necho hello"


def test_mime_user_data_parts_are_kept_in_order_and_karpy_nodeconfig_is_last() -> None:
    """The user's MIME parts come first, unchanged; karpy's NodeConfig is the last (winning) one."""
    user = (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="BOUNDARY"\n\n'
        "--BOUNDARY\nContent-Type: application/node.eks.aws\n\n"
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
        "spec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n"
        "--BOUNDARY\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho hi\n--BOUNDARY--\n"
    )
    parts = custom_parts(render(node_input(custom_user_data=user)))
    assert [ct for ct, _ in parts] == ["application/node.eks.aws", "text/x-shellscript", "application/node.eks.aws"]
    assert yaml.safe_load(parts[0][1])["spec"]["kubelet"]["config"]["shutdownGracePeriod"] == "30s"
    assert parse_node_config(render(node_input(custom_user_data=user)))["spec"]["cluster"]["name"] == "demo"


def test_bare_nodeconfig_user_data_is_one_part() -> None:
    """Non-MIME YAML is taken as a NodeConfig part."""
    user = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}\n"
    assert custom_parts(user) == [("application/node.eks.aws", user.strip("\n"))]


# -- the launch path picks the EC2NodeClass's AMI family -------------------------------------------------------


CAPACITY = {"cpu": 2000, "memory": 8 * 2**30, "pods": 29, "ephemeral-storage": 20 * 2**30}


def launch_request(alias: str, **spec: Any) -> LaunchRequest:
    nodeclass = {"metadata": {"name": "default"}, "spec": {"amiSelectorTerms": [{"alias": alias}], **spec}}
    return LaunchRequest(
        nodeclaim_name="default-abcde",
        nodepool_name="default",
        nodeclass=nodeclass,
        requirements=[],
        instance_types=[],
        labels={"karpenter.sh/nodepool": "default", "team": "a", "kubernetes.io/arch": "amd64"},
        taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
    )


def provider_user_data(alias: str, **spec: Any) -> str:
    request = launch_request(alias, **spec)
    provider = LaunchTemplateProvider(None, "demo", cluster_endpoint="https://127.0.0.1:6443", cluster_ca_bundle="Q0E=")
    family = amifamily.family_of(request.nodeclass["spec"])
    return provider.user_data(family, request.nodeclass["spec"], request, "spot", kubelet_resources(CAPACITY, {}))


@pytest.mark.parametrize(
    ("alias", "family", "marker"),
    [
        ("al2023@latest", "AL2023", "kind: NodeConfig"),
        ("al2@latest", "AL2", "/etc/eks/bootstrap.sh 'demo'"),
        ("bottlerocket@latest", "Bottlerocket", "[settings.kubernetes]"),
        ("windows2019@latest", "Windows", "Start-EKSBootstrap.ps1"),
        ("windows2022@latest", "Windows", "Start-EKSBootstrap.ps1"),
        ("windows2025@latest", "Windows", "Start-EKSBootstrap.ps1"),
    ],
)
def test_launch_user_data_is_the_familys_and_the_node_agent_reads_it(alias: str, family: str, marker: str) -> None:
    """Each family's launch user data carries the labels (restricted ones dropped), capacity type,
    do-not-sync-taints, taints + the unregistered taint, maxPods and karpy's reservations."""
    text = provider_user_data(alias)
    assert marker in text
    config = node_agent.parse_user_data(text)
    assert config is not None and config.family == family
    labels, taints = node_agent.parse_flags(config.flags)
    taints += node_agent.config_taints(config.kubelet_config, taints)
    assert labels == {
        "karpenter.sh/nodepool": "default",
        "team": "a",
        "karpenter.sh/capacity-type": "spot",
        "karpenter.sh/do-not-sync-taints": "true",
    }
    assert taints == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
    ]
    assert config.kubelet_config["maxPods"] == 29
    assert config.kubelet_config["kubeReserved"] == {"cpu": "70m", "ephemeral-storage": "1Gi", "memory": "574Mi"}
    assert config.kubelet_config["clusterDNS"] == ["10.100.0.10"]


def test_custom_family_passes_user_data_through_and_skips_do_not_sync_label() -> None:
    script = "#!/bin/bash\n/opt/my-bootstrap.sh\n"
    text = provider_user_data("al2023@latest", amiFamily="Custom", userData=script)
    assert text == script
    assert "karpenter.sh/do-not-sync-taints" not in node_labels(launch_request("al2023@latest"), "spot", "Custom")


def test_bottlerocket_launch_merges_the_users_toml() -> None:
    text = provider_user_data(
        "bottlerocket@latest",
        userData="[settings.kubernetes]\nmax-pods = 3\n[settings.host-containers.admin]\nenabled = true\n",
    )
    assert "[settings.host-containers.admin]\nenabled = true\n" in text
    assert "max-pods = 29\n" in text  # Karpenter's value wins


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("al2023@latest", [("/dev/xvda", 20)]),
        ("al2@latest", [("/dev/xvda", 20)]),
        ("bottlerocket@latest", [("/dev/xvda", 6), ("/dev/xvdb", 20)]),
        ("windows2022@latest", [("/dev/sda1", 50)]),
    ],
)
def test_default_block_device_mappings_per_family(alias: str, expected: list[tuple[str, int]]) -> None:
    mappings = block_device_mappings(launch_request(alias).nodeclass)
    assert [(m["DeviceName"], m["Ebs"]["VolumeSize"]) for m in mappings] == expected
    assert all(m["Ebs"]["VolumeType"] == "gp3" and m["Ebs"]["Encrypted"] for m in mappings)


def test_block_device_mappings_of_the_nodeclass_win_and_custom_has_none() -> None:
    spec = {
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi", "volumeType": "io2", "iops": 3000}}
        ]
    }
    assert block_device_mappings(launch_request("bottlerocket@latest", **spec).nodeclass) == [
        {"DeviceName": "/dev/xvdb", "Ebs": {"VolumeType": "io2", "Iops": 3000, "VolumeSize": 100}}
    ]
    assert block_device_mappings(launch_request("al2023@latest", amiFamily="Custom").nodeclass) == []
    assert amifamily.ephemeral_block_device("Bottlerocket") == "/dev/xvdb"
    assert amifamily.ephemeral_block_device("Custom") is None


def test_ec2nodeclass_view_exposes_family_user_data_and_block_devices() -> None:
    from karpy.apis.ec2nodeclass import EC2NodeClass

    obj = {
        "metadata": {"name": "br"},
        "spec": {
            "amiSelectorTerms": [{"alias": "bottlerocket@v1.46.0"}],
            "userData": "[settings.kubernetes]\n",
            "instanceStorePolicy": "RAID0",
            "blockDeviceMappings": [{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "50Gi"}}],
        },
    }
    view = EC2NodeClass.from_json(obj)
    assert (view.family, view.user_data, view.instance_store_policy) == (
        "Bottlerocket",
        "[settings.kubernetes]\n",
        "RAID0",
    )
    assert view.block_device_mappings == ({"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "50Gi"}},)
    assert EC2NodeClass.from_json({"metadata": {"name": "c"}, "spec": {"amiFamily": "Custom"}}).family == "Custom"
