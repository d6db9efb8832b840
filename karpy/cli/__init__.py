"""Command-line entry points (``karpy run``)."""
