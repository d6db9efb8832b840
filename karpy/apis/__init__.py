"""Karpenter v1 API surface: well-known labels, annotations, taints, finalizers, conditions (pure)."""
