"""The one in-memory view of the cluster every reconciler reads (plain synchronous mutators, one loop)."""
