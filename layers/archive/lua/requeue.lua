-- Put dead letters back on the archive queue (the archiver's exactly-once path counts each
-- partition once, whatever it was before) and remove them from the dead-letter stream.
-- KEYS[1] dead-letter stream   KEYS[2] archive queue stream
-- ARGV    dead-letter entry ids
-- Returns {requeued, missing or without a queue payload}.
local requeued, skipped = 0, 0
local found = {}
for i, id in ipairs(ARGV) do
  local entry = redis.call('XRANGE', KEYS[1], id, id)
  local payload
  if #entry == 1 then
    local fields = entry[1][2]
    for j = 1, #fields, 2 do
      if fields[j] == 'p' then
        payload = fields[j + 1]
      end
    end
  end
  if payload and payload ~= '' then
    found[#found + 1] = {id, payload}
  else
    skipped = skipped + 1
  end
end
for _, item in ipairs(found) do
  redis.call('XADD', KEYS[2], '*', 'p', item[2])
  redis.call('XDEL', KEYS[1], item[1])
  requeued = requeued + 1
end
return {requeued, skipped}
