-- Renew a lock this holder still has.
-- KEYS[1] lock string   ARGV[1] holder   ARGV[2] time to live (ms)
-- Returns 1 if renewed, 0 if the lock is gone or another holder has it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
