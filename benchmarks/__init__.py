"""karpy benchmarks (run as modules, e.g. ``.venv/bin/python -m benchmarks.scheduling``)."""
