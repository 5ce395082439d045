-- Give each worker ID a stable short number, assigning the next free one (from 1) to new IDs.
-- Two archivers registering the same new worker get the same number: the script is atomic.
-- The registry carries a generation (the server time when its first worker was registered, in
-- the field '' of the workers hash, which no worker ID can be): a process that cached numbers
-- of an earlier registry (Redis lost its data since) sees another generation and reloads.
-- KEYS[1] workers hash (worker_id -> short)   KEYS[2] reverse hash (short -> worker_id)
-- ARGV    worker IDs
-- Returns the generation, then the short numbers in ARGV order.
local generation = redis.call('HGET', KEYS[1], '')
if not generation then
  local now = redis.call('TIME')
  generation = now[1] .. '.' .. now[2]
  redis.call('HSET', KEYS[1], '', generation)
end
local out = {generation}
for i, worker in ipairs(ARGV) do
  local short = redis.call('HGET', KEYS[1], worker)
  if not short then
    short = redis.call('HLEN', KEYS[2]) + 1
    redis.call('HSET', KEYS[1], worker, short)
    redis.call('HSET', KEYS[2], short, worker)
  end
  out[i + 1] = tonumber(short)
end
return out
