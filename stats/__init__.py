"""Statistics layer: rollups of completed partitions (built by the statistics issue)."""
