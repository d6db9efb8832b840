"""The aiobotocore clients karpy uses, opened and closed together.

``AWSClients.create(region, endpoint_url)`` is an async context manager holding EC2, SSM, IAM, SQS, EKS and
Pricing clients (EKS for cluster discovery, :mod:`karpy.aws.eks`). The Pricing API only has endpoints in a
few regions (Karpenter ``pkg/providers/pricing``): us-east-1 for most regions, ap-south-1 for ``ap-*``,
eu-central-1 for ``eu-*``, cn-northwest-1 for ``cn-*``. When ``endpoint_url`` (``AWS_ENDPOINT_URL``) is given,
every client talks to it (a local AWS such as moto).

With a ``fence`` (:class:`karpy.runtime.fence.Fence`, granted by leader election) every client refuses every AWS
operation that is not a read: a botocore ``before-send`` handler raises :class:`karpy.runtime.fence.NotLeader`
right before the HTTP request would be sent. aiobotocore emits ``before-send.<service>.<Operation>`` once per
attempt after signing (``aiobotocore/endpoint.py``, ``_do_get_response``), so a botocore retry is checked again.
Reads are ``Describe*``, ``Get*`` and ``List*`` (SSM ``GetParameter(s)``, Pricing ``GetProducts``, SQS
``GetQueueUrl``, STS ``GetCallerIdentity``): a standby keeps its caches warm. SQS ``ReceiveMessage`` is a write: a
receive hides the messages from the leader for the visibility timeout.
The process identity is appended to the AWS user agent (``karpy-id/<identity>``), so a request log (moto's,
CloudTrail's ``userAgent``) attributes every call to one process.

The session's botocore model loader reads its JSON files with :class:`ModelFileLoader`: plain dicts instead of
``OrderedDict``, no ``documentation`` strings (help text, ~64% of EC2's model), and from ``endpoints.json`` (the
legacy endpoint table of every AWS service in every partition, 4 MiB as dicts) only the services of
:data:`ENDPOINT_SERVICES`. The data is held for the life of the process (botocore's loader caches it); this
keeps the six clients at ~18 MiB instead of ~35 MiB.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import attrs
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session

from karpy.runtime.fence import Fence

# Operation-name prefixes that only read. Everything else (Create*, Delete*, Terminate*, Run*, Put*, Add*, Send*,
# Receive*, Change*, ...) changes AWS state, or, for SQS ReceiveMessage, hides messages from the leader.
READ_OPERATION_PREFIXES = ("Describe", "Get", "List")


def is_read_operation(operation: str) -> bool:
    """True for an AWS API operation name (``DescribeInstances``, ``CreateFleet``) that only reads."""
    return operation.startswith(READ_OPERATION_PREFIXES)


def fence_hook(fence: Fence) -> Any:
    """A botocore ``before-send`` handler that calls ``fence.check`` for every operation that is not a read.

    The handler is synchronous, so the check and aiobotocore's ``await self._send(request)`` run in one step of
    the event loop. Raises :class:`karpy.runtime.fence.NotLeader` (botocore treats it as a non-retryable error and
    re-raises it to the caller); returns ``None`` otherwise, so the request is sent.
    """

    def before_send(event_name: str = "", **_kwargs: Any) -> None:
        # event_name is "before-send.<service-id>.<Operation>", e.g. "before-send.ec2.CreateFleet".
        service, _, operation = event_name.partition(".")[2].rpartition(".")
        if not is_read_operation(operation):
            fence.check(f"{service} {operation}")

    return before_send


# botocore's model file extensions, in its order of preference (botocore.loaders._JSON_OPEN_METHODS).
_MODEL_EXTENSIONS = (".json", ".json.gz")


# The endpoint prefixes (``endpoints.json`` service keys) of karpy's clients (EC2, SSM, IAM, SQS, Pricing, EKS) and
# of the clients botocore's credential providers create (STS for web identity / assume role, SSO, SSO-OIDC, and
# ``signin``, which newer botocore releases add for login credentials; a key the table lacks costs nothing).
# Another service's endpoints resolve from its partition's defaults, as for a service the table does not list;
# tests/aws/test_aws_model_loader.py checks that these resolve exactly as with the full table.
ENDPOINT_SERVICES = frozenset({"ec2", "ssm", "iam", "sqs", "api.pricing", "eks", "sts", "portal.sso", "oidc", "signin"})


def _only_endpoint_services(endpoints: Any) -> Any:
    """``endpoints.json`` with each partition's ``services`` limited to :data:`ENDPOINT_SERVICES` (in place)."""
    if not isinstance(endpoints, dict):
        return endpoints
    for partition in endpoints.get("partitions") or []:
        services = partition.get("services")
        if isinstance(services, dict):
            partition["services"] = {k: v for k, v in services.items() if k in ENDPOINT_SERVICES}
    return endpoints


def _drop_documentation(obj: dict[str, Any]) -> dict[str, Any]:
    """``json.loads`` object hook: the object without its ``documentation`` text. Only a string is dropped: a
    structure member that happens to be named ``documentation`` (a dict ``{"shape": ...}``) stays."""
    if isinstance(obj.get("documentation"), str):
        del obj["documentation"]
    return obj


class ModelFileLoader:
    """botocore's ``JSONFileLoader`` (``exists``/``load_file`` on a path without extension), decoding into plain
    dicts without documentation strings; ``endpoints`` keeps only :data:`ENDPOINT_SERVICES`.

    botocore decodes with ``object_pairs_hook=OrderedDict``; a dict keeps insertion order too, and botocore only
    iterates and indexes the models. Documentation is read only to build docstrings and help pages.
    """

    def exists(self, file_path: str) -> bool:
        """True when ``file_path`` + ``.json`` or ``.json.gz`` is a file."""
        return any(os.path.isfile(file_path + ext) for ext in _MODEL_EXTENSIONS)

    def load_file(self, file_path: str) -> Any:
        """The decoded ``file_path`` + ``.json`` (else ``.json.gz``), or None when neither exists.

        Raises:
            ValueError: the file is not JSON (botocore's loader raises the same).
        """
        for ext in _MODEL_EXTENSIONS:
            full = file_path + ext
            if os.path.isfile(full):
                with open(full, "rb") as f:
                    data = f.read()
                if ext == ".json.gz":
                    data = gzip.decompress(data)
                loaded = json.loads(data, object_hook=_drop_documentation)
                return _only_endpoint_services(loaded) if os.path.basename(file_path) == "endpoints" else loaded
        return None


def lean_session() -> AioSession:
    """An aiobotocore session whose model loader is a :class:`ModelFileLoader` (search paths unchanged, so
    ``AWS_DATA_PATH`` still applies)."""
    session = get_session()
    session.get_component("data_loader").file_loader = ModelFileLoader()
    return session


def user_agent_extra(identity: str) -> str | None:
    """The user-agent suffix naming this process (``karpy-id/<identity>``), or None without an identity."""
    return f"karpy-id/{identity}" if identity else None


def pricing_region(region: str) -> str:
    """The region whose Pricing API endpoint serves ``region`` (Karpenter's mapping)."""
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith("eu-"):
        return "eu-central-1"
    if region.startswith("cn-"):
        return "cn-northwest-1"
    return "us-east-1"


@attrs.define
class AWSClients:
    """Open aiobotocore clients (typed ``Any``: aiobotocore ships no stubs)."""

    region: str
    ec2: Any
    ssm: Any
    iam: Any
    sqs: Any
    pricing: Any
    endpoint_url: str | None = None
    eks: Any = None
    fence: Fence | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def create(
        cls, region: str, endpoint_url: str | None = None, *, fence: Fence | None = None, identity: str | None = None
    ) -> AsyncIterator[AWSClients]:
        """Open every client for ``region`` (``endpoint_url`` overrides all endpoints) and close them on exit.

        ``fence``: when given, every client refuses its non-read operations unless the fence holds (raising
        :class:`karpy.runtime.fence.NotLeader`, nothing sent); None means no check. ``identity`` (default: the
        fence's) is appended to the user agent as ``karpy-id/<identity>``.
        """
        session = lean_session()
        if identity is None:
            identity = fence.identity if fence is not None else ""
        # Standard retry mode: throttling and 5xx are retried with jittered backoff by botocore itself.
        config = AioConfig(
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=10,
            read_timeout=30,
            max_pool_connections=50,
            user_agent_extra=user_agent_extra(identity),
        )
        hook = fence_hook(fence) if fence is not None else None
        async with contextlib.AsyncExitStack() as stack:

            async def client(service: str, client_region: str, client_config: AioConfig = config) -> Any:
                opened = await stack.enter_async_context(
                    session.create_client(
                        service, region_name=client_region, endpoint_url=endpoint_url, config=client_config
                    )
                )
                if hook is not None:
                    opened.meta.events.register("before-send", hook)
                return opened

            yield cls(
                region=region,
                ec2=await client("ec2", region),
                ssm=await client("ssm", region),
                iam=await client("iam", region),
                sqs=await client("sqs", region),
                # One attempt: a failing Pricing API falls back to the static table (karpy.aws.pricing).
                pricing=await client(
                    "pricing", pricing_region(region), config.merge(AioConfig(retries={"total_max_attempts": 1}))
                ),
                endpoint_url=endpoint_url,
                eks=await client("eks", region),
                fence=fence,
            )
