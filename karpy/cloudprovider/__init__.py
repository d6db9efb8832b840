"""The cloud behind a protocol: instance types, offerings, launch and termination, typed errors."""

from karpy.cloudprovider.types import (
    CloudInstance,
    CloudProvider,
    CloudProviderError,
    IncompatibleInstanceTypes,
    InstanceType,
    InsufficientCapacityError,
    InterruptionKind,
    InterruptionMessage,
    InterruptionQueue,
    LaunchRequest,
    LaunchResult,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    Offering,
    QueuedMessage,
)

__all__ = [
    "CloudInstance",
    "CloudProvider",
    "CloudProviderError",
    "IncompatibleInstanceTypes",
    "InstanceType",
    "InsufficientCapacityError",
    "InterruptionKind",
    "InterruptionMessage",
    "InterruptionQueue",
    "LaunchRequest",
    "LaunchResult",
    "NodeClaimNotFoundError",
    "NodeClassNotReadyError",
    "Offering",
    "QueuedMessage",
]
