-- Change the archival switch (`_share.lua` describes its value): pause, resume or set the
-- gray release's share, keeping the other. A pause already set keeps its time and operator.
-- KEYS[1] the archival switch (string)
-- ARGV[1] 'pause' | 'resume' | 'share'
-- ARGV[2] for 'pause': the pause's members as JSON text ('"since":S,"by":B'); for 'share': 0..100
-- Returns {'err', 'wrong_type', what} | {paused (0/1), share} as stored after the change.
-- include: _checks.lua, _share.lua
local bad_type = wrong_type(KEYS, {'string'})
if bad_type then
  return bad_type
end
local value = redis.call('GET', KEYS[1])
local paused, share = switch_state(value)
local action = ARGV[1]
local members = ''  -- a pause's members, kept when the share changes
if paused then
  members = string.match(value, '^{"share":%d+,(.*)}$') or string.match(value, '^{(.*)}$') or ''
  if members == '' then
    members = '"since":null,"by":""'  -- set by hand
  end
end
if action == 'pause' and not paused then
  paused, members = true, ARGV[2]
elseif action == 'resume' then
  paused = false
elseif action == 'share' then
  share = tonumber(ARGV[2])
end
if paused then
  redis.call('SET', KEYS[1], share == 100 and ('{' .. members .. '}') or ('{"share":' .. share .. ',' .. members .. '}'))
elseif share == 100 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], '{"share":' .. share .. '}')
end
return {paused and 1 or 0, share}
