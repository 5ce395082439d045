-- The fencing of a leader's writes (lead.lua hands out the tokens; `layers/active/planning.py`).
-- Included by the scripts that name this file in their '-- include:' line
-- (layers/plumbing/scripts.py); not a script of its own.

-- nil when `token` is the fencing token of the lease the lock hash `lock` holds now (and, in a
-- namespace bound to an elk_coordinator deployment, Go's leader lock `go_lock` names that lease's
-- holder); else the refusal {'err', 'fenced', who leads now}: the writer's lease ended (it paused
-- past it, say) and a later one may be under way, so the script writes nothing.
local function fence_refusal(lock, token, go_lock)
  local held = redis.call('HMGET', lock, 'holder', 'token')
  if not held[2] or held[2] ~= token then
    return {'err', 'fenced', held[2] and ((held[1] or '') .. ' (token ' .. held[2] .. ')') or 'nobody'}
  end
  if go_lock then
    local go = redis.call('GET', go_lock)
    if go ~= held[1] then
      return {'err', 'fenced', 'elk_coordinator ' .. (go or 'nobody')}
    end
  end
  return nil
end
