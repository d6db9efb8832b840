"""One module per reconciler; :mod:`karpy.operator` wires them to cluster state and the work queues."""
