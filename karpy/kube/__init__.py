"""The only package that talks to the Kubernetes API (kubernetes-asyncio), on raw JSON, never model objects."""
