-- Delete a string key only if it still holds the value the caller read.
-- KEYS[1] string key
-- ARGV[1] expected value
-- Returns 1 if deleted, 0 if the key is gone or holds something else.
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
