"""The active layer: the worker SDK (blocking and asyncio), its steps' Lua, the queue counts and
the latencies it hands to Redis."""
