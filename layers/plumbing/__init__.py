"""How the layers talk to Redis: steps run blocking or awaited, the Lua loader, slot moves,
replies, stored metadata."""
