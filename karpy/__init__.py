"""karpy: just-in-time nodes for Kubernetes on AWS, API-compatible with Karpenter v1."""

__version__ = "0.1.0"
