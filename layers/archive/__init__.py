"""The archive: its queue and dead letters, tiers and transitions, sealing, shelves, the worker
registry, and their Lua (commit, lookup, the statistics' merges)."""
