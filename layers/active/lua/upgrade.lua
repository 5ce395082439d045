-- Rewrite records in their format's layout (`_layout.lua`), changing nothing they say: a
-- native record of an earlier release gets the member order of this one, a Go record whose
-- members are not where Go's encoding/json puts them gets Go's order. The worker's hot scripts
-- answer 'upgrade' for a record in neither layout; the SDK runs this, then the step again.
-- KEYS[1] active hash   KEYS[2] leases zset
-- ARGV[1..n] pids
-- A leased record's lease gets the sign of its status (`KeySchema.leases`: an earlier release
-- kept every lease positive).
-- Returns the pids whose records cannot be read (corrupt), left as they are; a pid with no
-- record is passed over. Everything is read before the first write.
-- include: _checks.lua, _layout.lua, _record.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset'})
if bad_type then
  return bad_type
end
local corrupt, rewrite = {}, {}
for _, pid in ipairs(ARGV) do
  local rec, why = load_record(KEYS[1], pid)
  local out = rec and encode_record(rec)
  if out and layout_of(out) then
    if out ~= redis.call('HGET', KEYS[1], pid) then
      rewrite[#rewrite + 1] = {pid, out, rec}
    end
  elseif why ~= 'not_found' then
    corrupt[#corrupt + 1] = pid
  end
end
for _, item in ipairs(rewrite) do
  local pid, out, rec = item[1], item[2], item[3]
  redis.call('HSET', KEYS[1], pid, out)
  if is_leased(rec.status) then
    local beat = heartbeat_ms(rec)
    redis.call('ZADD', KEYS[2], rec.status == 'running' and -beat or beat, pid)
  end
end
return corrupt
