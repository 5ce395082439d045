-- The two record layouts the worker's hot scripts change in place, included by the scripts
-- that name this file in their '-- include:' line (layers/plumbing/scripts.py); not a script of its own.
--
-- A step changes a few members of a record and keeps the rest byte for byte, so the hot
-- scripts (claim, update, complete) neither parse nor re-encode a record: one anchored
-- string.match reads the members they need, and the new record is the old one with those
-- members spliced in. Two layouts are known:
--   native  partarchive's own, the members a step changes first:
--           {"status":S,"worker_id":W,"version":V,"updated_at":U,"last_heartbeat":H,
--            "claimed_at":C,"partition_id":P,"min_id":A,"max_id":B,"error":E,"created_at":T,
--            "options":O}          (times: integer unix seconds)
--   elk     elk_coordinator's PartitionInfo as Go's encoding/json writes it:
--           {"partition_id":P,"min_id":A,"max_id":B,"worker_id":W,"last_heartbeat":H,
--            "status":S,"updated_at":U[,"options":O],"version":V[,"error":E],"created_at":T}
--           (times: RFC 3339 strings)
-- A record in neither (a native one of an earlier release, a Go record with members
-- reordered, a corrupt one) is not touched here: the script answers {'upgrade', pid} and the
-- SDK has upgrade.lua rewrite it in its layout (or report it corrupt), then tries again.
--
-- Every string function Lua calls, and every string it makes, costs Redis about as much as a
-- short command (and Lua's patterns more: a character at a time), so a native record in the
-- state a step expects takes the shortest way: a search for what it starts with, its status and
-- worker (`native_head`), a search for the member after its version, then one concatenation for
-- the new record. Before it writes, a step checks the record whole to its end (`native_members`:
-- it refuses any record Python or Go would not read the same way), unless the record is the one
-- the caller's last step on it answered (`native_at`'s `seen`). `layout_of` reads any record in
-- either layout, for Go's records and for a step that has to say what is wrong.

-- What a native record in status `status` held by `worker` (JSON text) starts with, up to its
-- version's digits.
local function native_head(status, worker)
  return '{"status":"' .. status .. '","worker_id":' .. worker .. ',"version":'
end

-- Index of the quote that closes the JSON string opening at s[i], or nil.
local function string_end(s, i)
  local j = i + 1
  while true do
    local k = string.find(s, '["\\]', j)
    if not k then
      return nil
    end
    if string.byte(s, k) == 34 then
      return k
    end
    j = k + 2
  end
end

-- The end of the JSON object or array opening at s[i], or nil.
local function container_end(s, i)
  local depth, j = 0, i
  while true do
    local k = string.find(s, '[%[%]{}"]', j)
    if not k then
      return nil
    end
    local c = string.byte(s, k)
    if c == 34 then
      k = string_end(s, k)
      if not k then
        return nil
      end
    elseif c == 123 or c == 91 then
      depth = depth + 1
    else
      depth = depth - 1
      if depth == 0 then
        return k
      end
    end
    j = k + 1
  end
end

-- The members of a native record from its version's digits at `i` to its end, or nil when the
-- record is not whole in the native layout (cut short, a member missing, twice or out of place,
-- anything after it): its version (a number), last_heartbeat and claimed_at (text), and the
-- indexes of the commas before "claimed_at", "partition_id" and "error". Every step reads a
-- native record through this, the hot ones too, so no step accepts what another refuses.
local function native_members(raw, i)
  local version, heartbeat, c, claimed_at, p, e = string.match(raw,
    '^(%d+),"updated_at":%d+,"last_heartbeat":(%d+)(),"claimed_at":(%d+)(),"partition_id":%d+,"min_id":%-?%d+,'
    .. '"max_id":%-?%d+(),"error":"', i)
  if not e then
    return nil
  end
  local q = e + 10  -- the error's closing quote (most records have none)
  if string.byte(raw, q) ~= 34 then
    q = string_end(raw, e + 9)
  end
  if q and string.find(raw, '^,"created_at":%d+,"options":{}}$', q + 1) then
    return tonumber(version), heartbeat, c, claimed_at, p, e
  end
  local o = q and string.match(raw, '^,"created_at":%d+,"options":(){', q + 1)
  if o and container_end(raw, o) == #raw - 1 and string.byte(raw, #raw) == 125 then
    return tonumber(version), heartbeat, c, claimed_at, p, e
  end
end

-- For a native record that starts with `head` (`native_head`): its version and the index of the
-- comma before "claimed_at"; nil when the record is not whole in the native layout
-- (`native_members`). `seen` is the record as a step's reply last gave it to the caller, who
-- read it then (Python's parser refuses what `native_members` does): a record still equal to it
-- (an O(1) comparison, Lua's strings being interned) is whole, and only searched.
local function native_at(raw, head, seen)
  if string.find(raw, head, 1, true) ~= 1 then
    return nil
  end
  if raw ~= seen then
    local version, _, c = native_members(raw, #head + 1)
    return version, c
  end
  local comma = string.find(raw, ',', #head + 1, true)
  return tonumber(string.sub(raw, #head + 1, comma - 1)), string.find(raw, ',"claimed_at":', comma, true)
end

-- A native record from its members: `at` is the index of "partition_id" in `raw`, whose members
-- from there on are kept.
local function native_record(raw, at, status, worker, version, updated_at, heartbeat, claimed_at)
  return native_head(status, worker) .. version .. ',"updated_at":' .. updated_at .. ',"last_heartbeat":' .. heartbeat
    .. ',"claimed_at":' .. claimed_at .. ',' .. string.sub(raw, at)
end

-- The members of a native record, with the positions a splice needs, or nil: {status, version
-- (number), heartbeat (unix s text), claimed_at (text), w (index of the worker's opening quote),
-- w_end (its closing quote), at (index of "partition_id"), e (index of the comma before "error")}.
local function native_layout(raw)
  local status, w = string.match(raw, '^{"status":"(%l+)","worker_id":()"')
  local w_end = w and string_end(raw, w)
  if not w_end or string.sub(raw, w_end + 1, w_end + 11) ~= ',"version":' then
    return nil
  end
  local version, heartbeat, _, claimed_at, p, e = native_members(raw, w_end + 12)
  if not version then
    return nil
  end
  return {status = status, version = version, heartbeat = heartbeat, claimed_at = claimed_at,
          w = w, w_end = w_end, at = p + 1, e = e}
end

-- The members of a Go record a step reads, with the positions a splice needs, or nil:
-- {status, version (number), heartbeat (JSON text), w, w_end (the worker's quotes), mid (index
--  of the options member, or of version when there are none), v and v_after (the version's
--  digits start at v and end before v_after)}.
local function elk_layout(raw)
  local w = string.match(raw, '^{"partition_id":%d+,"min_id":%-?%d+,"max_id":%-?%d+,"worker_id":()"')
  if not w then
    return nil
  end
  local w_end = string_end(raw, w)
  if not w_end then
    return nil
  end
  local heartbeat, status, mid = string.match(raw,
    '^,"last_heartbeat":("[^"\\]*"),"status":"(%l+)","updated_at":"[^"\\]*",()', w_end + 1)
  if not mid then
    return nil
  end
  local at = mid
  if string.find(raw, '^"options":{', mid) then
    local o_end = container_end(raw, mid + 10)
    if not o_end or string.byte(raw, o_end + 1) ~= 44 then
      return nil
    end
    at = o_end + 2
  end
  local v, version, v_after = string.match(raw, '^"version":()(%d+)()[,}]', at)
  if not v then
    return nil
  end
  local tail = v_after
  if string.find(raw, '^,"error":"', tail) then
    tail = string_end(raw, tail + 9)
    if not tail then
      return nil
    end
    tail = tail + 1
  end
  if not string.find(raw, '^,"created_at":"[^"\\]*"}$', tail) then
    return nil
  end
  return {status = status, version = tonumber(version), heartbeat = heartbeat, w = w, w_end = w_end,
          mid = mid, v = v, v_after = v_after}
end

-- The record's layout, its format ('native' or 'elk') and what the splices need, or nil.
local function layout_of(raw)
  if string.byte(raw, 3) == 115 then -- {"s
    local rec = native_layout(raw)
    if rec then
      rec.fmt = 'native'
    end
    return rec
  end
  local rec = elk_layout(raw)
  if rec then
    rec.fmt = 'elk'
  end
  return rec
end

-- `rec` (of `raw`) with status, worker (JSON text), heartbeat and updated_at set to `now` (as
-- the format writes it) and the version one up; `claimed_at` also set in a native record
-- when given. A heartbeat of nil keeps the record's.
local function spliced(raw, rec, status, worker, now, heartbeat, claimed_at)
  local version = string.format('%d', rec.version + 1)
  if rec.fmt == 'native' then
    return native_record(raw, rec.at, status, worker, version, now, heartbeat or rec.heartbeat,
      claimed_at or rec.claimed_at)
  end
  return string.sub(raw, 1, rec.w - 1) .. worker .. ',"last_heartbeat":' .. (heartbeat or rec.heartbeat)
    .. ',"status":"' .. status .. '","updated_at":' .. now .. ',' .. string.sub(raw, rec.mid, rec.v - 1) .. version
    .. string.sub(raw, rec.v_after)
end

-- The layout of a record held by `worker` (JSON text) at version `expected` ('' = any), claimed
-- or (unless `claimed_only`) running, or nil and the reply to return: {'upgrade'} for a record
-- in neither layout, else the error naming what is not as the caller expects.
local function held_layout(raw, worker, expected, claimed_only)
  local rec = layout_of(raw)
  if not rec then
    return nil, {'upgrade'}
  end
  if rec.status ~= 'claimed' and (claimed_only or rec.status ~= 'running') then
    return nil, {'err', 'bad_state', rec.status}
  end
  local holder = string.sub(raw, rec.w, rec.w_end)
  if holder ~= worker then
    return nil, {'err', 'not_owner', holder}
  end
  if expected ~= '' and tonumber(expected) ~= rec.version then
    return nil, {'err', 'version', string.format('%d', rec.version)}
  end
  return rec
end
