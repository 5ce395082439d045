-- elk_coordinator's own status counters (elk_partition_stats), moved as Go moves them, in a
-- namespace bound to a Go deployment. Included by the scripts that name this file in their
-- '-- include:' line (layers/plumbing/scripts.py); not a script of its own.
-- include: _checks.lua

-- The move of one partition from status `from` to `to` in Go's counters (`key`, nil when the
-- namespace is not bound), read before the script's first write: the plan for
-- `go_stats_write`, or nil and the error reply. A counter Go left unreadable (it writes some
-- with %.14g) is left alone: Go reads it as 0.
local function go_stats_read(key, from, to)
  local plan = {key = key}
  if not plan.key or from == to then
    return plan
  end
  local values, err = typed_call('hash', 'HMGET', plan.key, from, to)
  if not values then
    return nil, err
  end
  for j, field in ipairs({from, to}) do
    if not values[j] or string.find(values[j], '^%-?%d+$') then
      plan[#plan + 1] = {field, j == 1 and -1 or 1}
    end
  end
  return plan
end

local function go_stats_write(plan)
  for _, move in ipairs(plan) do
    redis.call('HINCRBY', plan.key, move[1], move[2])
  end
end
