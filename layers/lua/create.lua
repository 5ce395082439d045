-- Create partitions for an ID range, numbered after the highest partition ever created.
-- KEYS[1] active hash      KEYS[2] pending zset     KEYS[3] counts hash    KEYS[4] meta hash
-- ARGV[1] first_id         ARGV[2] last_id          ARGV[3] size           ARGV[4] now (unix s)
-- ARGV[5] options JSON (object, copied into every record)
-- Returns {first_pid, last_pid} of the partitions created.
local first_id, last_id, size = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local count = math.floor((last_id - first_id) / size) + 1
local last_pid = redis.call('HINCRBY', KEYS[4], 'last_pid', count)
local first_pid = last_pid - count + 1
local now = ARGV[4]
for i = 0, count - 1 do
  local pid = first_pid + i
  local lo = first_id + i * size
  local hi = math.min(lo + size - 1, last_id)
  local rec = {partition_id = pid, min_id = lo, max_id = hi, status = 'pending', worker_id = '',
               version = 0, error = '', created_at = now, updated_at = now, last_heartbeat = 0,
               claimed_at = 0}
  redis.call('HSET', KEYS[1], int(pid), encode_record(rec, ARGV[5]))
  redis.call('ZADD', KEYS[2], pid, int(pid))
end
redis.call('HINCRBY', KEYS[3], 'pending', count)
return {first_pid, last_pid}
