-- A heartbeat on one record, as heartbeat.lua writes it, a function so that beat.lua renews every lease
-- of a worker the same way. Included by the scripts that name this file in their '-- include:' line
-- (layers/plumbing/scripts.py); not a script of its own.
-- include: _layout.lua

-- The record `raw` of a partition claimed or running, held by `worker` (JSON text) at version
-- `expected` ('' = any), with its heartbeat and updated_at now (`now_s` unix s, `now_elk` RFC 3339
-- JSON text for a Go record, '' when not given) and its version one up; or nil and the reply that
-- says why not: {'upgrade'} (a record in neither layout of `_layout.lua`), {'elk_time'} (a Go
-- record and no `now_elk`), {'err', code, detail}. `seen` is `native_at`'s (nil: not known).
local function renewed(raw, worker, expected, now_s, now_elk, seen)
  -- a native record as a heartbeat finds it: running, or claimed and not started yet
  local head = native_head('running', worker)
  local version, rest = native_at(raw, head, seen)
  if not rest then
    head = native_head('claimed', worker)
    version, rest = native_at(raw, head, seen)
  end
  if rest and (expected == '' or tonumber(expected) == version) then
    return head .. string.format('%d', version + 1) .. ',"updated_at":' .. now_s .. ',"last_heartbeat":' .. now_s
      .. string.sub(raw, rest)
  end

  -- any other record: a Go record, or one that is not the caller's
  local rec, refused = held_layout(raw, worker, expected, false)
  if not rec then
    return nil, refused
  end
  local now = rec.fmt == 'elk' and (now_elk or '') or now_s
  if now == '' then
    return nil, {'elk_time'}
  end
  return spliced(raw, rec, rec.status, worker, now, now)
end
