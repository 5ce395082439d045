-- Move a queue entry that cannot be archived to the dead-letter stream, with its reason.
-- KEYS[1] archive queue stream   KEYS[2] dead-letter stream
-- ARGV[1] consumer group   ARGV[2] entry id   ARGV[3] reason   ARGV[4] raw payload
-- ARGV[5] most dead letters kept (older ones are trimmed, approximately)
-- Returns the dead-letter entry id.
local dead = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'entry', ARGV[2], 'reason', ARGV[3],
  'p', ARGV[4])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return dead
