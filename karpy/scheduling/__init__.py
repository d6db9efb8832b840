"""The provisioning simulation: pure, no I/O, benchmarked. Entry point: :func:`karpy.scheduling.scheduler.solve`.

Where to find what, by the Karpenter core file (``pkg/controllers/provisioning/scheduling/``) it follows:
``scheduler.go`` → :mod:`.scheduler` (the solve loop) and :mod:`.state` (the state it shares);
``nodeclaim.go``, ``nodeclaimtemplate.go`` → :mod:`.nodeclaim`; ``existingnode.go`` → :mod:`.existingnode`;
``topology.go``, ``topologygroup.go`` → :mod:`.topologydomains` (decisions) and :mod:`.topology` (counts);
``queue.go``, ``preferences.go`` → :mod:`.queue`; unschedulable messages → :mod:`.explain`; karpy's own
price-aware additions → :mod:`.pricing` and :mod:`.repack`; instance-type filtering (``pkg/cloudprovider``
``InstanceTypes``) → :mod:`.instancetypes`; requirements (``pkg/scheduling/requirements.go``) →
:mod:`.requirements`; taints (``pkg/scheduling/taints.go``) → :mod:`.taints`; volume topology
(``volumetopology.go``) → :mod:`.volumes`; the binder's check → :mod:`.predicate`.
"""
