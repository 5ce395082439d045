-- Release a lock only if this holder still has it.
-- KEYS[1] lock string   ARGV[1] holder
-- Returns 1 if released, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
