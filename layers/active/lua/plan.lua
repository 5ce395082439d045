-- The plan's next run of partitions, created by the leader that holds the lease (`_fence.lua`;
-- `layers/active/planning.py`): the partitions of ARGV[15], numbered and written as create.lua writes
-- them (`_create.lua`), and the plan's bookkeeping, in one step. The plan's next start (KEYS[4]
-- next_id, decimal text) moves past the run only if it is still what the caller read (ARGV[6]), and
-- the caller starts the run there, so the runs stay contiguous whoever creates them: no overlap, no
-- hole, across leader changes and crashes. The run is appended to KEYS[5] (merged into its last entry,
-- ARGV[9], when ARGV[10] asks and its pids follow on), which keeps the ARGV[14] latest: the pids of
-- older entries go to the plan's 'folded' intervals. The span Go's leader planned since the last run
-- (ARGV[13]) is appended to KEYS[6]. Go's counters move as Go's creation moves them, and the plan keeps
-- Go's last_allocated_id as this step left it (go_last_allocated), so that only a change by Go's
-- leader is taken for its allocation.
-- KEYS[1] active hash   KEYS[2] pending zset   KEYS[3] partitions meta hash   KEYS[4] plan hash
-- KEYS[5] plan runs list   KEYS[6] plan Go spans list   KEYS[7] leader lock hash
-- KEYS[8] Go's stats hash, KEYS[9] Go's leader lock (only when bound to a Go deployment)
-- ARGV[1] fencing token   ARGV[2] record format ('native' | 'elk')   ARGV[3] now as the format writes it
-- ARGV[4] options as JSON text ('' = none)   ARGV[5] highest partition id allowed
-- ARGV[6] next_id as read ('' = nothing planned yet)   ARGV[7] next_id after this run
-- ARGV[8] first_id, kept when nothing was planned yet   ARGV[9] the last runs entry as read ('' = none)
-- ARGV[10] 'merge' to merge the run into that entry   ARGV[11] the partition size
-- ARGV[12] Go's last_allocated_id as read ('' = absent; bound only)
-- ARGV[13] the span Go's leader planned before this run, 'min_id,max_id' ('' = none)
-- ARGV[14] how many runs entries to keep   ARGV[15] min_id,max_id of each partition, comma-separated
-- Returns {'ok', first_pid, last_pid} or {'err', code, detail}: 'fenced' (not the lease's token:
-- who leads now), 'moved' (the plan or Go's allocation moved on since they were read: next_id now),
-- 'pid_range', 'exists', 'wrong_type', 'corrupt_meta'. Everything is read and checked before the
-- first write.
-- include: _checks.lua, _create.lua, _fence.lua
local go_stats, go_lock = KEYS[8], KEYS[9]
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'hash', 'hash', 'list', 'list', 'hash', 'hash', 'string'})
if bad_type then
  return bad_type
end
local refused = fence_refusal(KEYS[7], ARGV[1], go_lock)
if refused then
  return refused
end
local next_id = redis.call('HGET', KEYS[4], 'next_id') or ''
local last_run = redis.call('LINDEX', KEYS[5], -1) or ''
local go_last = go_stats and (redis.call('HGET', go_stats, 'last_allocated_id') or '') or ''
if next_id ~= ARGV[6] or last_run ~= ARGV[9] or go_last ~= ARGV[12] then
  return {'err', 'moved', next_id}
end
local bounds = {}
for id in string.gmatch(ARGV[15], '[^,]+') do
  bounds[#bounds + 1] = id
end
local count = #bounds / 2
local first_pid
first_pid, refused = new_pids(KEYS[1], KEYS[3], go_stats, count, ARGV[5])
if not first_pid then
  return refused
end
local last_pid = first_pid + count - 1
local run = string.format('%d,%d,', first_pid, last_pid) .. bounds[1] .. ',' .. bounds[#bounds] .. ',' .. ARGV[11]
local merged
if ARGV[10] == 'merge' and ARGV[13] == '' then
  local first, last, min_id = string.match(last_run, '^(%d+),(%d+),(%-?%d+),')
  if first and tonumber(last) + 1 == first_pid then
    merged = first .. ',' .. string.format('%d', last_pid) .. ',' .. min_id .. ',' .. bounds[#bounds] .. ',' .. ARGV[11]
  end
end

write_partitions(KEYS[1], KEYS[2], KEYS[3], first_pid, bounds, ARGV[2], ARGV[3], ARGV[4])
if go_stats then
  go_stats_created(go_stats, count, last_pid, bounds[#bounds])
  -- what Go's counter says now, as written here (%.14g may have rounded it): not an allocation of Go's
  redis.call('HSET', KEYS[4], 'go_last_allocated', redis.call('HGET', go_stats, 'last_allocated_id'))
end
if ARGV[6] == '' then
  redis.call('HSET', KEYS[4], 'first_id', ARGV[8])
end
if ARGV[13] ~= '' then
  redis.call('RPUSH', KEYS[6], ARGV[13])
end
if merged then
  redis.call('LSET', KEYS[5], -1, merged)
else
  redis.call('RPUSH', KEYS[5], run)
  redis.call('HINCRBY', KEYS[4], 'runs', 1)
end
local folded = redis.call('HGET', KEYS[4], 'folded') or ''
local folding = false
while redis.call('LLEN', KEYS[5]) > tonumber(ARGV[14]) do
  local first, last = string.match(redis.call('LPOP', KEYS[5]), '^(%d+),(%d+),')
  local head, lo, hi = string.match(folded, '^(.-)(%d+)%-(%d+)$')
  if hi and tonumber(hi) + 1 == tonumber(first) then
    folded = head .. lo .. '-' .. last
  else
    folded = folded .. (folded ~= '' and ',' or '') .. first .. '-' .. last
  end
  folding = true
end
if folding then
  redis.call('HSET', KEYS[4], 'folded', folded)
end
redis.call('HSET', KEYS[4], 'next_id', ARGV[7], 'token', ARGV[1])
redis.call('HINCRBY', KEYS[4], 'partitions', count)
return {'ok', first_pid, last_pid}
