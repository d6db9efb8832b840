"""Cloud-provider call metrics: a decorator around any :class:`~karpy.cloudprovider.types.CloudProvider` that
times each call and counts its typed errors, as Karpenter core's ``pkg/cloudprovider/metrics/cloudprovider.go``
``Decorate`` does.

* ``karpenter_cloudprovider_duration_seconds{controller, method, provider}`` — every call, seconds
  (Karpenter's ``DurationBuckets``).
* ``karpenter_cloudprovider_errors_total{controller, method, provider, error, nodepool}`` — calls that raised;
  ``error`` is ``InsufficientCapacityError``, ``NodeClaimNotFoundError``, ``NodeClassNotReadyError`` or
  ``unknown``; ``nodepool`` is the NodeClaim's NodePool for Create (karpy's Delete and Get take a providerID
  only, and GetInstanceTypes a NodeClass, so those carry "" as Karpenter's List does).

``method`` uses Karpenter's names (``Create``, ``Delete``, ``Get``, ``List``, ``GetInstanceTypes``); karpy's
other cloud calls (``incompatible_instance_types``, ``create_tags``, ``mark_unavailable``) are not CloudProvider
methods in Karpenter and are passed through unmeasured. ``controller`` is the name of the reconciler making the
call, read from the ``controller`` structlog context variable the runtime binds for every reconcile (Karpenter:
``injection.GetControllerName``), "" outside a reconcile.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import structlog
from prometheus_client import Counter, Histogram

from karpy.cloudprovider.types import (
    CloudInstance,
    CloudProvider,
    IncompatibleInstanceTypes,
    InstanceType,
    InsufficientCapacityError,
    LaunchRequest,
    LaunchResult,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    RepairPolicy,
)

# Karpenter core ``pkg/metrics/constants.go`` DurationBuckets (controller-runtime's plus 120 … 600 s), seconds: the
# one definition, shared by karpy.metrics and karpy.metrics_runtime.
DURATION_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
    120, 150, 300, 450, 600,
)  # fmt: skip

METHOD_DURATION = Histogram(
    "karpenter_cloudprovider_duration_seconds",
    "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
    ["controller", "method", "provider"],
    buckets=DURATION_BUCKETS,
)
ERRORS_TOTAL = Counter(
    "karpenter_cloudprovider_errors_total",
    "Total number of errors returned from CloudProvider calls.",
    ["controller", "method", "provider", "error", "nodepool"],
)

T = TypeVar("T")


def error_type(err: BaseException) -> str:
    """Karpenter's ``error`` label value for ``err`` (``GetErrorTypeLabelValue``)."""
    if isinstance(err, InsufficientCapacityError):
        return "InsufficientCapacityError"
    if isinstance(err, NodeClaimNotFoundError):
        return "NodeClaimNotFoundError"
    if isinstance(err, NodeClassNotReadyError):
        return "NodeClassNotReadyError"
    return "unknown"


def controller_name() -> str:
    """The reconciler on whose behalf the current task runs ("" outside a reconcile)."""
    return str(structlog.contextvars.get_contextvars().get("controller", ""))


class MeteredCloudProvider:
    """``cloud`` with every CloudProvider call measured (see the module docstring); ``provider`` is the
    ``provider`` label (Karpenter AWS ``CloudProvider.Name()``: ``aws``). Attributes other than the measured
    methods are ``cloud``'s."""

    def __init__(self, cloud: CloudProvider, *, provider: str) -> None:
        self.cloud = cloud
        self.provider = provider

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cloud, name)

    async def _measure(self, method: str, call: Callable[[], Awaitable[T]], nodepool: str = "") -> T:
        controller = controller_name()
        start = time.perf_counter()
        try:
            return await call()
        except Exception as err:
            ERRORS_TOTAL.labels(controller, method, self.provider, error_type(err), nodepool).inc()
            raise
        finally:
            METHOD_DURATION.labels(controller, method, self.provider).observe(time.perf_counter() - start)

    async def get_instance_types(self, nodeclass: Mapping[str, Any]) -> list[InstanceType]:
        """``cloud.get_instance_types``, measured as ``GetInstanceTypes``."""
        return await self._measure("GetInstanceTypes", lambda: self.cloud.get_instance_types(nodeclass))

    async def incompatible_instance_types(self, nodeclass: Mapping[str, Any]) -> IncompatibleInstanceTypes:
        """``cloud.incompatible_instance_types`` (not a Karpenter CloudProvider method: unmeasured)."""
        return await self.cloud.incompatible_instance_types(nodeclass)

    async def create(self, request: LaunchRequest) -> LaunchResult:
        """``cloud.create``, measured as ``Create`` (errors labelled with the NodeClaim's NodePool)."""
        return await self._measure("Create", lambda: self.cloud.create(request), request.nodepool_name)

    async def delete(self, provider_id: str) -> None:
        """``cloud.delete``, measured as ``Delete`` (its NodeClaimNotFoundError, the end of a termination, is
        counted as an error as Karpenter counts it)."""
        await self._measure("Delete", lambda: self.cloud.delete(provider_id))

    async def get(self, provider_id: str) -> CloudInstance:
        """``cloud.get``, measured as ``Get``."""
        return await self._measure("Get", lambda: self.cloud.get(provider_id))

    async def create_tags(self, provider_id: str, tags: Mapping[str, str]) -> None:
        """``cloud.create_tags`` (Karpenter's tagging controller calls the instance provider: unmeasured)."""
        await self.cloud.create_tags(provider_id, tags)

    async def list(self) -> list[CloudInstance]:
        """``cloud.list``, measured as ``List``."""
        return await self._measure("List", self.cloud.list)

    async def placement_group_drift(self, nodeclass: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
        """``cloud.placement_group_drift`` (part of Karpenter's ``IsDrifted``, measured there: unmeasured here)."""
        return await self.cloud.placement_group_drift(nodeclass, labels)

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str, reservation_id: str = "") -> None:
        """``cloud.mark_unavailable`` (synchronous cache write: unmeasured)."""
        self.cloud.mark_unavailable(instance_type, zone, capacity_type, reservation_id)

    def repair_policies(self) -> Sequence[RepairPolicy]:
        """``cloud.repair_policies`` (static data: unmeasured)."""
        return self.cloud.repair_policies()


__all__ = ["ERRORS_TOTAL", "METHOD_DURATION", "MeteredCloudProvider", "controller_name", "error_type"]
