-- The leader's check of the plan, written (`layers/active/planning.py`), by the leader that holds the
-- lease (`_fence.lua`) and only if the check's cursors are still where it read them: the entries of
-- the partitions it checked set or deleted, so the two hashes hold what is wrong now; the runs'
-- own entries ('run:<pid>') are given whole each time.
-- KEYS[1] plan hash   KEYS[2] holes hash   KEYS[3] overlaps hash   KEYS[4] leader lock hash
-- KEYS[5] Go's leader lock (bound only)
-- ARGV[1] fencing token   ARGV[2] seen_pid as read   ARGV[3] sweep_pid as read ('' = none yet)
-- ARGV[4] seen_pid now   ARGV[5] sweep_pid now   ARGV[6] passes ended now (0 or 1)   ARGV[7] now (unix s)
-- ARGV[8] partitions failed for good   ARGV[9] the pids checked, 'lo-hi,lo-hi' ('' = none)
-- ARGV[10..] what was found: 'hole' | 'overlap', the entry's field, its JSON, ...
-- Returns {'ok'} or {'err', code, detail}: 'fenced' (who leads now), 'moved' (the cursors moved on),
-- 'wrong_type'. Everything is read and checked before the first write.
-- include: _checks.lua, _fence.lua
local bad_type = wrong_type(KEYS, {'hash', 'hash', 'hash', 'hash', 'string'})
if bad_type then
  return bad_type
end
local refused = fence_refusal(KEYS[4], ARGV[1], KEYS[5])
if refused then
  return refused
end
local cursors = redis.call('HMGET', KEYS[1], 'seen_pid', 'sweep_pid')
if (cursors[1] or '') ~= ARGV[2] or (cursors[2] or '') ~= ARGV[3] then
  return {'err', 'moved', (cursors[1] or '') .. ' ' .. (cursors[2] or '')}
end
local checked = {}
for lo, hi in string.gmatch(ARGV[9], '(%d+)-(%d+)') do
  checked[#checked + 1] = {tonumber(lo), tonumber(hi)}
end
local found = {hole = {}, overlap = {}}
for i = 10, #ARGV, 3 do
  found[ARGV[i]][ARGV[i + 1]] = ARGV[i + 2]
end
for kind, key in pairs({hole = KEYS[2], overlap = KEYS[3]}) do
  for _, name in ipairs(redis.call('HKEYS', key)) do
    local pid = tonumber(name)
    local stale = not found[kind][name] and string.sub(name, 1, 4) == 'run:'
    for _, span in ipairs(checked) do
      stale = stale or (pid and pid >= span[1] and pid <= span[2] and not found[kind][name])
    end
    if stale then
      redis.call('HDEL', key, name)
    end
  end
  for name, entry in pairs(found[kind]) do
    redis.call('HSET', key, name, entry)
  end
end
redis.call('HSET', KEYS[1], 'seen_pid', ARGV[4], 'sweep_pid', ARGV[5], 'checked_at', ARGV[7], 'failed_final', ARGV[8])
if ARGV[6] ~= '0' then
  redis.call('HINCRBY', KEYS[1], 'passes', ARGV[6])
end
return {'ok'}
