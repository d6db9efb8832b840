"""Karpenter v1 API surface (pure: no I/O, no client library).

Well-known labels, annotations, taints, finalizers and conditions (:mod:`~karpy.apis.labels`); quantities and
resource maps; drift hashes; the typed views of NodePool, NodeClaim and EC2NodeClass that cluster state builds
once per watch event (:mod:`~karpy.apis.nodepool`, :mod:`~karpy.apis.nodeclaim`, :mod:`~karpy.apis.ec2nodeclass`,
with :mod:`~karpy.apis.meta`); and the helpers they share: status conditions, times, taints.
"""
