-- Create partitions numbered after the highest partition id ever created, all or nothing.
-- KEYS[1] active hash      KEYS[2] pending zset     KEYS[3] meta hash
-- KEYS[4] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] record format ('native' | 'elk')   ARGV[2] now as the format writes it (JSON text)
-- ARGV[3] options as JSON text ('' = none)   ARGV[4] highest partition id allowed
-- ARGV[5] min_id,max_id of each partition, all comma-separated in one argument (decimal text:
--         ids are signed 64-bit, more than a Lua number holds exactly)
-- Returns {'ok', first_pid, last_pid} or {'err', 'pid_range', last pid it would reach} or
-- {'err', 'exists', pid}. Ids go on from the larger of our counter and Go's max_partition_id, so
-- partitions created by an elk_coordinator leader and by partarchive never share an id; Go's
-- counters move as Go's creation moves them (`_create.lua`).
-- include: _checks.lua, _create.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'hash', 'hash'})
if bad_type then
  return bad_type
end
local bounds = {}
for id in string.gmatch(ARGV[5], '[^,]+') do
  bounds[#bounds + 1] = id
end
local count = #bounds / 2
local first_pid, refused = new_pids(KEYS[1], KEYS[3], KEYS[4], count, ARGV[4])
if not first_pid then
  return refused
end
write_partitions(KEYS[1], KEYS[2], KEYS[3], first_pid, bounds, ARGV[1], ARGV[2], ARGV[3])
local last_pid = first_pid + count - 1
if KEYS[4] then
  go_stats_created(KEYS[4], count, last_pid, bounds[#bounds])
end
return {'ok', first_pid, last_pid}
