"""End-to-end scenarios and the local cluster they run on."""
