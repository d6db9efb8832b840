"""The provisioning simulation: pure, no I/O, benchmarked. Entry point: :func:`karpy.scheduling.scheduler.solve`."""
