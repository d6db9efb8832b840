"""Volume topology: the node requirements a pod's persistent volumes impose (Karpenter ``VolumeTopology``).

Pure: takes the pod, PersistentVolumeClaim, PersistentVolume and StorageClass objects as JSON and returns the
ORed requirement alternatives for :attr:`karpy.scheduling.model.Pod.volume_terms`:

* a **bound** PVC contributes its PV's ``spec.nodeAffinity.required.nodeSelectorTerms`` (ORed terms), minus
  ``kubernetes.io/hostname`` requirements of ``local``/``hostPath`` volumes (Karpenter ignores them: a new node
  can never carry the old node's name);
* an **unbound** PVC whose StorageClass has ``volumeBindingMode: WaitForFirstConsumer`` contributes the class's
  ``allowedTopologies`` (each term's ``matchLabelExpressions`` ANDed, terms ORed); without allowedTopologies it
  adds nothing (the volume follows the node);
* an unbound PVC with ``Immediate`` binding, a missing PVC, PV or StorageClass makes the pod unschedulable for
  now, with a reason (Karpenter skips such pods until the volume is provisioned or the object exists);
* generic ephemeral volumes use the claim ``<pod>-<volume>`` once it exists, else the template's class.

Alternatives of different volumes are crossed (every combination ANDed), as Karpenter does. Zone keys are
normalised: legacy ``failure-domain.beta.kubernetes.io/zone`` and the EBS CSI driver's
``topology.ebs.csi.aws.com/zone`` both mean ``topology.kubernetes.io/zone``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from karpy.apis import labels as wk
from karpy.scheduling.model import IN, Requirement

JSON = Mapping[str, Any]
DEFAULT_CLASS_ANNOTATION: Final = "storageclass.kubernetes.io/is-default-class"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
ZONE_ALIASES: Final = {**wk.NORMALIZED_LABELS, "topology.ebs.csi.aws.com/zone": wk.LABEL_ZONE}
# Upper bound on crossed alternatives: beyond it only the first ones are kept (the explosion is pathological).
MAX_ALTERNATIVES: Final = 64

Terms = tuple[tuple[Requirement, ...], ...]


@attrs.frozen(slots=True)
class VolumeTopology:
    """``terms``: ORed requirement alternatives (``()`` = unconstrained); ``error``: why the pod must wait."""

    terms: Terms = ()
    error: str | None = None


def _key(key: str) -> str:
    return ZONE_ALIASES.get(key, key)


def _requirement(expr: JSON) -> Requirement:
    return Requirement(_key(str(expr.get("key", ""))), str(expr.get("operator", "")), tuple(expr.get("values") or ()))


def pv_terms(pv: JSON, *, keep_hostname: bool = False) -> Terms:
    """A PersistentVolume's required node affinity terms (hostname dropped for local and hostPath volumes unless
    ``keep_hostname``: binding onto an existing node must honour it, as kube-scheduler's VolumeBinding does)."""
    spec = pv.get("spec") or {}
    required = (spec.get("nodeAffinity") or {}).get("required") or {}
    local = bool(spec.get("local") or spec.get("hostPath")) and not keep_hostname
    terms = []
    for term in required.get("nodeSelectorTerms") or []:
        reqs = tuple(
            _requirement(e)
            for e in term.get("matchExpressions") or []
            if not (local and e.get("key") == wk.LABEL_HOSTNAME)
        )
        if reqs:
            terms.append(reqs)
    return tuple(terms)


def class_terms(storage_class: JSON) -> Terms:
    """A StorageClass's ``allowedTopologies`` as ORed terms of ``key In values``."""
    terms = []
    for term in storage_class.get("allowedTopologies") or []:
        reqs = tuple(
            Requirement(_key(str(e.get("key", ""))), IN, tuple(str(v) for v in e.get("values") or ()))
            for e in term.get("matchLabelExpressions") or []
        )
        if reqs:
            terms.append(reqs)
    return tuple(terms)


def default_class(storage_classes: Mapping[str, JSON]) -> str | None:
    """The StorageClass annotated as the cluster default (newest name wins a tie, like the admission plugin)."""
    defaults = sorted(
        name
        for name, sc in storage_classes.items()
        if ((sc.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
    )
    return defaults[-1] if defaults else None


def _claims(pod: JSON) -> list[tuple[str, JSON | None]]:
    """(claim name, ephemeral template spec or None) per PVC-backed volume of the pod."""
    name = str((pod.get("metadata") or {}).get("name", ""))
    out: list[tuple[str, JSON | None]] = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("persistentVolumeClaim"):
            out.append((str(volume["persistentVolumeClaim"].get("claimName", "")), None))
        elif volume.get("ephemeral"):
            template = ((volume["ephemeral"].get("volumeClaimTemplate") or {}).get("spec")) or {}
            out.append((f"{name}-{volume.get('name', '')}", template))
    return out


def _unbound_terms(class_name: str | None, claim: str, storage_classes: Mapping[str, JSON]) -> Terms | str:
    if not class_name:
        class_name = default_class(storage_classes)
        if class_name is None:
            return ()  # no class: statically provisioned elsewhere, nothing to constrain yet
    storage_class = storage_classes.get(class_name)
    if storage_class is None:
        return f'storageclass "{class_name}" of persistentvolumeclaim "{claim}" not found'
    if storage_class.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER:
        return f'persistentvolumeclaim "{claim}" is unbound and storageclass "{class_name}" binds Immediate'
    return class_terms(storage_class)


def _cross(a: Terms, b: Terms) -> Terms:
    if not a:
        return b
    if not b:
        return a
    return tuple(x + y for x in a for y in b)[:MAX_ALTERNATIVES]


def volume_topology(
    pod: JSON,
    pvcs: Mapping[str, JSON],
    pvs: Mapping[str, JSON],
    storage_classes: Mapping[str, JSON],
    *,
    keep_hostname: bool = False,
) -> VolumeTopology:
    """The node requirements the pod's volumes impose.

    Args:
        pod: the pod JSON (``metadata.name``/``namespace``, ``spec.volumes``).
        pvcs: PersistentVolumeClaims keyed ``namespace/name``.
        pvs: PersistentVolumes keyed by name.
        storage_classes: StorageClasses keyed by name.
        keep_hostname: keep local/hostPath PVs' hostname requirements (for a pod bound to an existing node).

    Returns:
        The ORed alternatives (crossed over volumes), or an error naming the object that blocks the pod.
    """
    namespace = str((pod.get("metadata") or {}).get("namespace", ""))
    terms: Terms = ()
    for claim, template in _claims(pod):
        pvc = pvcs.get(f"{namespace}/{claim}")
        if pvc is None:
            if template is None:
                return VolumeTopology(error=f'persistentvolumeclaim "{namespace}/{claim}" not found')
            found = _unbound_terms(template.get("storageClassName"), f"{namespace}/{claim}", storage_classes)
        else:
            spec = pvc.get("spec") or {}
            volume_name = spec.get("volumeName")
            if volume_name:
                pv = pvs.get(str(volume_name))
                if pv is None:
                    return VolumeTopology(error=f'persistentvolume "{volume_name}" not found')
                found = pv_terms(pv, keep_hostname=keep_hostname)
            else:
                found = _unbound_terms(spec.get("storageClassName"), f"{namespace}/{claim}", storage_classes)
        if isinstance(found, str):
            return VolumeTopology(error=found)
        terms = _cross(terms, found)
    return VolumeTopology(terms=terms)


def merge_terms(existing: Terms, extra: Sequence[tuple[Requirement, ...]]) -> Terms:
    """Cross ``extra`` alternatives into ``existing`` ones (both ORed sets; empty means unconstrained)."""
    return _cross(existing, tuple(extra))


__all__ = ["VolumeTopology", "class_terms", "default_class", "merge_terms", "pv_terms", "volume_topology"]
