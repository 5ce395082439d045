-- Delete consumers of a stream's group with no unacknowledged entry that were idle long enough, checked and
-- deleted in one step: a consumer that reads between a check and its deletion would lose the
-- unacknowledged entries it read (XGROUP DELCONSUMER drops them), never to be delivered
-- again. Inside the script nobody reads in between; a consumer that reads afterwards is created
-- again by its read.
-- KEYS[1] stream
-- ARGV[1] group   ARGV[2] idle time in ms a consumer must exceed   ARGV[3..] consumer names
-- Returns the names deleted (none if the stream or the group does not exist).
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'stream' then
  return {}
end
local info = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if type(info) == 'table' and info.err then
  return {}
end
local idle_over = tonumber(ARGV[2])
local found = {}
for _, consumer in ipairs(info) do
  local fields = {}
  for i = 1, #consumer, 2 do
    fields[consumer[i]] = consumer[i + 1]
  end
  found[fields['name']] = fields
end
local deleted = {}
for i = 3, #ARGV do
  local c = found[ARGV[i]]
  if c and tonumber(c['pending']) == 0 and tonumber(c['idle']) > idle_over then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[i])
    deleted[#deleted + 1] = ARGV[i]
  end
end
return deleted
