"""The live benchmark: karpy and Karpenter itself on the same local control plane (see README.md here)."""
