-- Rewrite records in their format's layout (`_layout.lua`), changing nothing they say, and put
-- each in the index of its status; set aside the records no reader can read. A native record of
-- an earlier release gets the member order of this one, a Go record whose members are not where
-- Go's encoding/json puts them gets Go's order. The worker's hot scripts answer 'upgrade' for a
-- record in neither layout; the SDK runs this, then the step again. `partarchive dead-letters
-- requeue` runs it on the records set aside, once an operator has mended them.
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] pending zset   KEYS[4] failed zset
-- KEYS[5] unreadable zset (pid -> unix ms it was set aside)
-- ARGV[1] now (unix ms)   ARGV[2] 'aside': set every pid's record aside as unreadable, whatever
--         this script makes of it (the SDK's parser refused it); '' otherwise   ARGV[3..n] pids
-- A readable record leaves the unreadable set and is in the index of its status: pending and
-- failed by pid, a lease with the sign of its status (`KeySchema.leases`: an earlier release kept
-- every lease positive). An unreadable one (not JSON, a member of the wrong kind, a range whose
-- min is above its max, a pid out of range: what Python and Go refuse) leaves every index, so no
-- claim meets it again, and joins the unreadable set, kept as it is. A pid with no record leaves
-- the unreadable set.
-- Returns the pids whose records cannot be read. Everything is read before the first write.
-- include: _checks.lua, _layout.lua, _record.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'zset', 'zset', 'zset'})
if bad_type then
  return bad_type
end

-- Whether decimal texts a <= b, as signed 64-bit integers (more than a Lua number holds exactly).
local function int_le(a, b)
  local a_digits, b_digits = string.gsub(a, '^%-?0*', ''), string.gsub(b, '^%-?0*', '')
  local a_neg = a_digits ~= '' and string.byte(a, 1) == 45
  local b_neg = b_digits ~= '' and string.byte(b, 1) == 45
  if a_neg ~= b_neg then
    return a_neg
  end
  if #a_digits ~= #b_digits then
    return (#a_digits < #b_digits) ~= a_neg
  end
  return a_digits == b_digits or ((a_digits < b_digits) ~= a_neg)
end

local function readable(rec, out)
  local pid = tonumber(rec.raw.partition_id)
  return out and layout_of(out) and pid >= 1 and pid <= 4294967295 and int_le(rec.raw.min_id, rec.raw.max_id)
end

local corrupt, rewrite, gone = {}, {}, {}
local aside = ARGV[2] == 'aside'
for i = 3, #ARGV do
  local pid = ARGV[i]
  local rec, why = load_record(KEYS[1], pid)
  local out = rec and encode_record(rec)
  if rec and not aside and readable(rec, out) then
    rewrite[#rewrite + 1] = {pid, out, rec}
  elseif why == 'not_found' then
    gone[#gone + 1] = pid
  else
    corrupt[#corrupt + 1] = pid
  end
end
for _, item in ipairs(rewrite) do
  local pid, out, rec = item[1], item[2], item[3]
  if out ~= redis.call('HGET', KEYS[1], pid) then
    redis.call('HSET', KEYS[1], pid, out)
  end
  redis.call('ZREM', KEYS[5], pid)
  if is_leased(rec.status) then
    local beat = heartbeat_ms(rec)
    redis.call('ZADD', KEYS[2], rec.status == 'running' and -beat or beat, pid)
  elseif rec.status == 'pending' or rec.status == 'failed' then
    redis.call('ZADD', rec.status == 'pending' and KEYS[3] or KEYS[4], pid, pid)
  end
end
for _, pid in ipairs(gone) do
  redis.call('ZREM', KEYS[5], pid)
end
for _, pid in ipairs(corrupt) do
  redis.call('ZREM', KEYS[2], pid)
  redis.call('ZREM', KEYS[3], pid)
  redis.call('ZREM', KEYS[4], pid)
  redis.call('ZADD', KEYS[5], 'NX', ARGV[1], pid)
end
return corrupt
