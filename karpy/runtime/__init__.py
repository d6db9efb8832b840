"""Reconciler contract, work queue with per-key backoff, batcher and supervised tasks."""
