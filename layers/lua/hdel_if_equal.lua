-- Delete hash fields only where they still hold the value the caller read (a source record
-- imported and verified), so a record rewritten in the meantime by a Go worker is kept.
-- KEYS[1] hash
-- ARGV    pairs: field, expected value
-- Returns the number of fields deleted.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 0
end
local deleted = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    deleted = deleted + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return deleted
