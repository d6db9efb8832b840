"""``karpy simulate``: what-if provisioning on manifests with the controller's engine, no cluster, no AWS.

Modules: :mod:`~karpy.simulate.manifests` (reading and expanding manifests), :mod:`~karpy.simulate.catalogue`
(built-in EC2 data or a JSON catalogue file), :mod:`~karpy.simulate.plan` (running the engine and the launch
choice, text/JSON output), :mod:`~karpy.simulate.inputs` (JSON → scheduling model conversions shared with the
provisioner) and :mod:`~karpy.simulate.gencatalogue` (regenerates the built-in data from moto).
This package module imports nothing, so the provisioner can import :mod:`karpy.simulate.inputs` cheaply.
"""
