"""The EC2NodeClass ``spec.kubelet`` block: free-form in the CRD, checked here as Karpenter v1.15 checks it.

Since v1.15 the CRD keeps ``spec.kubelet`` as written (``x-kubernetes-preserve-unknown-fields``): any field of the
kubelet's ``KubeletConfiguration`` (``kubelet.config.k8s.io/v1beta1``) is accepted by the apiserver, and the
AWS provider's nodeclass validation controller checks it instead (``pkg/apis/v1/kubeletconfiguration_validation.go``
``ValidateKubeletConfig``, called from ``pkg/controllers/nodeclass/validation.go``): a block that fails sets the
EC2NodeClass's ``ValidationSucceeded`` (and so ``Ready``) to False with reason ``InvalidKubeletConfiguration``,
which stops launches; nothing crashes and other NodeClasses keep working.

What is checked, as Karpenter does:

- every field is a ``KubeletConfiguration`` field (:data:`KUBELET_FIELDS`, k8s.io/kubelet v0.37.0, the version
  Karpenter v1.15 compiles against) and its JSON value has that field's type (integers in range, Go durations);
  nested structs are only checked to be objects (Karpenter's strict decode also checks their fields);
- eviction maps are keyed by eviction signals, with a percentage or a non-negative quantity (a duration for
  ``evictionSoftGracePeriod``), and ``evictionSoft`` / ``evictionSoftGracePeriod`` have the same keys;
- ``kubeReserved`` / ``systemReserved`` reserve only cpu, memory, ephemeral-storage and pid, never negative;
- image GC thresholds are percentages with high > low; ``podsPerCore``, ``evictionMaxPodGracePeriod`` and
  ``maxPods`` are not negative; ``registerWithTaints`` is Karpenter's own (rejected);
- CEL expressions (a string ``maxPods``, a non-quantity reservation) need Karpenter's ``NodeClassCEL`` feature
  gate, off by default and not offered by karpy: rejected (Karpenter's reason ``KubeletExpressionsDisabled``
  with the gate off; karpy reports them with the other errors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from karpy.apis.hashing import go_duration_ns
from karpy.apis.quantity import QuantityError, parse_quantity

REASON_INVALID: Final = "InvalidKubeletConfiguration"

# JSON shapes of KubeletConfiguration's fields.
BOOL, INT32, INT64, FLOAT, STRING, DURATION = "bool", "int32", "int64", "float", "string", "duration"
STRINGS, INTS, OBJECT, OBJECTS = "[]string", "[]int32", "object", "[]object"
STRING_MAP, BOOL_MAP, STRINGS_MAP = "map[string]string", "map[string]bool", "map[string][]string"

# k8s.io/kubelet v0.37.0 config/v1beta1 KubeletConfiguration: JSON field name -> shape (TypeMeta's kind and
# apiVersion included, as the strict decode accepts them).
KUBELET_FIELDS: Final[Mapping[str, str]] = {
    "kind": STRING,
    "apiVersion": STRING,
    "enableServer": BOOL,
    "staticPodPath": STRING,
    "podLogsDir": STRING,
    "syncFrequency": DURATION,
    "fileCheckFrequency": DURATION,
    "httpCheckFrequency": DURATION,
    "staticPodURL": STRING,
    "staticPodURLHeader": STRINGS_MAP,
    "address": STRING,
    "port": INT32,
    "readOnlyPort": INT32,
    "tlsCertFile": STRING,
    "tlsPrivateKeyFile": STRING,
    "tlsCipherSuites": STRINGS,
    "tlsCurvePreferences": INTS,
    "tlsMinVersion": STRING,
    "rotateCertificates": BOOL,
    "serverTLSBootstrap": BOOL,
    "authentication": OBJECT,
    "authorization": OBJECT,
    "registryPullQPS": INT32,
    "registryBurst": INT32,
    "imagePullCredentialsVerificationPolicy": STRING,
    "preloadedImagesVerificationAllowlist": STRINGS,
    "eventRecordQPS": INT32,
    "eventBurst": INT32,
    "enableDebuggingHandlers": BOOL,
    "enableContentionProfiling": BOOL,
    "healthzPort": INT32,
    "healthzBindAddress": STRING,
    "oomScoreAdj": INT32,
    "clusterDomain": STRING,
    "clusterDNS": STRINGS,
    "streamingConnectionIdleTimeout": DURATION,
    "nodeStatusUpdateFrequency": DURATION,
    "nodeStatusReportFrequency": DURATION,
    "nodeLeaseDurationSeconds": INT32,
    "imageMinimumGCAge": DURATION,
    "imageMaximumGCAge": DURATION,
    "imageGCHighThresholdPercent": INT32,
    "imageGCLowThresholdPercent": INT32,
    "volumeStatsAggPeriod": DURATION,
    "kubeletCgroups": STRING,
    "systemCgroups": STRING,
    "cgroupRoot": STRING,
    "cgroupsPerQOS": BOOL,
    "cgroupDriver": STRING,
    "cpuManagerPolicy": STRING,
    "singleProcessOOMKill": BOOL,
    "cpuManagerPolicyOptions": STRING_MAP,
    "cpuManagerReconcilePeriod": DURATION,
    "memoryManagerPolicy": STRING,
    "topologyManagerPolicy": STRING,
    "topologyManagerScope": STRING,
    "topologyManagerPolicyOptions": STRING_MAP,
    "qosReserved": STRING_MAP,
    "runtimeRequestTimeout": DURATION,
    "hairpinMode": STRING,
    "maxPods": INT32,
    "podCIDR": STRING,
    "podPidsLimit": INT64,
    "resolvConf": STRING,
    "runOnce": BOOL,
    "cpuCFSQuota": BOOL,
    "cpuCFSQuotaPeriod": DURATION,
    "nodeStatusMaxImages": INT32,
    "maxOpenFiles": INT64,
    "contentType": STRING,
    "kubeAPIQPS": INT32,
    "kubeAPIBurst": INT32,
    "serializeImagePulls": BOOL,
    "maxParallelImagePulls": INT32,
    "evictionHard": STRING_MAP,
    "evictionSoft": STRING_MAP,
    "evictionSoftGracePeriod": STRING_MAP,
    "evictionPressureTransitionPeriod": DURATION,
    "evictionMaxPodGracePeriod": INT32,
    "evictionMinimumReclaim": STRING_MAP,
    "mergeDefaultEvictionSettings": BOOL,
    "podsPerCore": INT32,
    "enableControllerAttachDetach": BOOL,
    "protectKernelDefaults": BOOL,
    "makeIPTablesUtilChains": BOOL,
    "iptablesMasqueradeBit": INT32,
    "iptablesDropBit": INT32,
    "featureGates": BOOL_MAP,
    "failSwapOn": BOOL,
    "memorySwap": OBJECT,
    "containerLogMaxSize": STRING,
    "containerLogMaxFiles": INT32,
    "containerLogMaxWorkers": INT32,
    "containerLogMonitorInterval": DURATION,
    "configMapAndSecretChangeDetectionStrategy": STRING,
    "systemReserved": STRING_MAP,
    "kubeReserved": STRING_MAP,
    "reservedSystemCPUs": STRING,
    "showHiddenMetricsForVersion": STRING,
    "systemReservedCgroup": STRING,
    "kubeReservedCgroup": STRING,
    "enforceNodeAllocatable": STRINGS,
    "allowedUnsafeSysctls": STRINGS,
    "defaultPodSysctls": STRING_MAP,
    "volumePluginDir": STRING,
    "providerID": STRING,
    "kernelMemcgNotification": BOOL,
    "logging": OBJECT,
    "enableSystemLogHandler": BOOL,
    "enableSystemLogQuery": BOOL,
    "shutdownGracePeriod": DURATION,
    "shutdownGracePeriodCriticalPods": DURATION,
    "shutdownGracePeriodByPodPriority": OBJECTS,
    "crashLoopBackOff": OBJECT,
    "reservedMemory": OBJECTS,
    "enableProfilingHandler": BOOL,
    "enableDebugFlagsHandler": BOOL,
    "seccompDefault": BOOL,
    "memoryThrottlingFactor": FLOAT,
    "memoryReservationPolicy": STRING,
    "registerWithTaints": OBJECTS,
    "registerNode": BOOL,
    "tracing": OBJECT,
    "localStorageCapacityIsolation": BOOL,
    "containerRuntimeEndpoint": STRING,
    "imageServiceEndpoint": STRING,
    "failCgroupV1": BOOL,
    "userNamespaces": OBJECT,
}

EVICTION_SIGNALS: Final = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
)
RESERVED_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage", "pid")
# Fields Karpenter sets itself at bootstrap, so a user's value would be silently dropped.
KARPENTER_OWNED: Final = {
    "registerWithTaints": "Karpenter sets it from the NodeClaim's taints so the node registers unschedulable "
    "until it's ready",
}
_INT_RANGE: Final = {INT32: (-(2**31), 2**31 - 1), INT64: (-(2**63), 2**63 - 1)}


def _go_duration(value: str) -> int | None:
    """``value`` in nanoseconds when Go ``time.ParseDuration`` takes it, else None."""
    try:
        return go_duration_ns(value)
    except ValueError:
        return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_string_map(value: Any, item: type) -> bool:
    return isinstance(value, Mapping) and all(isinstance(v, item) and not _bool_as(v, item) for v in value.values())


def _bool_as(value: Any, item: type) -> bool:
    return isinstance(value, bool) and item is not bool


def _has_shape(value: Any, shape: str) -> bool:
    """Whether a JSON value decodes into a Go field of ``shape`` (``null`` always does)."""
    if value is None:
        return True
    if shape in _INT_RANGE:
        low, high = _INT_RANGE[shape]
        return _is_int(value) and low <= value <= high
    checks: dict[str, bool] = {
        BOOL: isinstance(value, bool),
        FLOAT: isinstance(value, int | float) and not isinstance(value, bool),
        STRING: isinstance(value, str),
        DURATION: isinstance(value, str) and _go_duration(value) is not None,
        STRINGS: isinstance(value, list) and all(isinstance(v, str) for v in value),
        INTS: isinstance(value, list) and all(_has_shape(v, INT32) for v in value),
        OBJECT: isinstance(value, Mapping),
        OBJECTS: isinstance(value, list) and all(isinstance(v, Mapping) for v in value),
        STRING_MAP: _is_string_map(value, str),
        BOOL_MAP: _is_string_map(value, bool),
        STRINGS_MAP: isinstance(value, Mapping)
        and all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in value.values()),
    }
    return checks[shape]


def _threshold_error(field: str, key: str, value: str) -> str:
    """A percentage in [0, 100] or a non-negative quantity (Karpenter ``validateEvictionThreshold``)."""
    if value.endswith("%"):
        try:
            pct = float(value[:-1])
        except ValueError:
            pct = -1.0
        ok = 0.0 <= pct <= 100.0
        return "" if ok else f"spec.kubelet.{field}[{key}]: {value!r} must be a percentage or a resource quantity"
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return f"spec.kubelet.{field}[{key}]: {value!r} must be a percentage or a resource quantity"
    return f"spec.kubelet.{field}[{key}]: {value!r} can't be a negative resource quantity" if amount < 0 else ""


def _grace_period_error(field: str, key: str, value: str) -> str:
    """A non-negative Go duration (Karpenter ``validateEvictionGracePeriod``)."""
    nanoseconds = _go_duration(value)
    if nanoseconds is None:
        return f"spec.kubelet.{field}[{key}]: {value!r} must be a duration"
    if nanoseconds < 0:
        return f"spec.kubelet.{field}[{key}]: {value!r} can't be a negative duration"
    return ""


def _type_errors(kubelet: Mapping[str, Any]) -> list[str]:
    errors = []
    for field, value in kubelet.items():
        shape = KUBELET_FIELDS.get(field)
        if shape is None:
            errors.append(f'spec.kubelet: unknown field "{field}"')
        elif field == "maxPods" and isinstance(value, str):
            errors.append(
                "spec.kubelet.maxPods: a CEL expression needs Karpenter's NodeClassCEL feature gate, "
                "which karpy does not offer"
            )
        elif not _has_shape(value, shape):
            errors.append(f"spec.kubelet.{field}: {value!r} is not a valid {shape}")
    return errors


def _map(kubelet: Mapping[str, Any], field: str) -> dict[str, str]:
    value = kubelet.get(field)
    return dict(value) if _has_shape(value, STRING_MAP) and value is not None else {}


def _eviction_errors(kubelet: Mapping[str, Any]) -> list[str]:
    errors = []
    for field in ("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim"):
        for key, value in sorted(_map(kubelet, field).items()):
            if key not in EVICTION_SIGNALS:
                errors.append(
                    f"spec.kubelet.{field}: {key!r} isn't a valid eviction signal, must be one of "
                    + ", ".join(EVICTION_SIGNALS)
                )
            check = _grace_period_error if field == "evictionSoftGracePeriod" else _threshold_error
            if message := check(field, key, value):
                errors.append(message)
    soft, grace = set(_map(kubelet, "evictionSoft")), set(_map(kubelet, "evictionSoftGracePeriod"))
    # A soft threshold without a grace period is ignored by the kubelet, and the reverse is rejected by it.
    errors += [f"spec.kubelet.evictionSoft[{s}]: has no matching evictionSoftGracePeriod" for s in sorted(soft - grace)]
    errors += [f"spec.kubelet.evictionSoftGracePeriod[{s}]: has no matching evictionSoft" for s in sorted(grace - soft)]
    return errors


def _reserved_errors(kubelet: Mapping[str, Any]) -> list[str]:
    errors = []
    for field in ("kubeReserved", "systemReserved"):
        for key, value in sorted(_map(kubelet, field).items()):
            if key not in RESERVED_RESOURCES:
                errors.append(
                    f"spec.kubelet.{field}: {key!r} isn't a reservable resource, must be one of "
                    + ", ".join(RESERVED_RESOURCES)
                )
            if value.startswith("-"):
                errors.append(f"spec.kubelet.{field}[{key}]: {value!r} can't be a negative resource quantity")
                continue
            try:
                parse_quantity(value)
            except QuantityError:
                errors.append(
                    f"spec.kubelet.{field}[{key}]: {value!r} is not a quantity (a CEL expression needs Karpenter's "
                    "NodeClassCEL feature gate, which karpy does not offer)"
                )
    return errors


def _int(kubelet: Mapping[str, Any], field: str) -> int | None:
    value = kubelet.get(field)
    return value if _is_int(value) else None


def _bound_errors(kubelet: Mapping[str, Any]) -> list[str]:
    errors = []
    for field in ("imageGCHighThresholdPercent", "imageGCLowThresholdPercent"):
        value = _int(kubelet, field)
        if value is not None and not 0 <= value <= 100:
            errors.append(f"spec.kubelet.{field}: {value} must be between 0 and 100")
    for field in ("podsPerCore", "evictionMaxPodGracePeriod", "maxPods"):
        value = _int(kubelet, field)
        if value is not None and value < 0:
            errors.append(f"spec.kubelet.{field}: {value} can't be negative")
    high, low = _int(kubelet, "imageGCHighThresholdPercent"), _int(kubelet, "imageGCLowThresholdPercent")
    if high is not None and low is not None and high <= low:
        errors.append(
            f"spec.kubelet: imageGCHighThresholdPercent ({high}) must be greater than "
            f"imageGCLowThresholdPercent ({low})"
        )
    return errors


def validate_kubelet(kubelet: Any) -> list[str]:
    """The problems of an EC2NodeClass ``spec.kubelet`` block, one message each; ``[]`` when it is valid (or
    absent). Karpenter v1.15 ``ValidateKubeletConfig`` (see the module docstring); never raises."""
    if kubelet is None:
        return []
    if not isinstance(kubelet, Mapping):
        return [f"spec.kubelet: {kubelet!r} is not an object"]
    errors = [f"spec.kubelet.{f}: can't be set, {why}" for f, why in KARPENTER_OWNED.items() if f in kubelet]
    errors += _type_errors(kubelet)
    errors += _eviction_errors(kubelet)
    errors += _reserved_errors(kubelet)
    errors += _bound_errors(kubelet)
    return errors


def usable_kubelet(kubelet: Any) -> dict[str, Any]:
    """The ``spec.kubelet`` block to size instance types and render user data with: as written when valid, else
    ``{}`` (the AMI family's defaults; the NodeClass is not Ready then, so nothing launches with it)."""
    if not isinstance(kubelet, Mapping) or validate_kubelet(kubelet):
        return {}
    return dict(kubelet)
