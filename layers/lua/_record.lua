-- Shared helpers, prepended to every script by layers/scripts.py (not a script of its own).
--
-- The record JSON is rebuilt here field by field instead of with cjson.encode, because
-- cjson prints numbers with 14 significant digits and would corrupt ids above 10^14.
-- `options` is kept byte for byte: the encoder always writes it last, and an unescaped
-- `,"options":` can only be the structural key (quotes inside strings are escaped).

local function int(v)
  return string.format('%.0f', tonumber(v))
end

local function raw_options(raw)
  local pos = string.find(raw, ',"options":', 1, true)
  if not pos then
    return '{}'
  end
  return string.sub(raw, pos + 11, -2)
end

local function encode_record(r, options)
  return '{"partition_id":' .. int(r.partition_id)
    .. ',"min_id":' .. int(r.min_id)
    .. ',"max_id":' .. int(r.max_id)
    .. ',"status":' .. cjson.encode(r.status)
    .. ',"worker_id":' .. cjson.encode(r.worker_id)
    .. ',"version":' .. int(r.version or 0)
    .. ',"error":' .. cjson.encode(r.error or '')
    .. ',"created_at":' .. int(r.created_at or 0)
    .. ',"updated_at":' .. int(r.updated_at or 0)
    .. ',"last_heartbeat":' .. int(r.last_heartbeat or 0)
    .. ',"claimed_at":' .. int(r.claimed_at or 0)
    .. ',"options":' .. options .. '}'
end

local function is_leased(status)
  return status == 'claimed' or status == 'running'
end

-- The record of a claimed/running partition held by `worker`, at version `expected` ('' = any).
-- Returns raw JSON and the decoded record, or nil and the error reply for the caller to return.
local function load_owned(hash, pid, worker, expected)
  local raw = redis.call('HGET', hash, pid)
  if not raw then
    return nil, {'err', 'not_found', ''}
  end
  local rec = cjson.decode(raw)
  if not is_leased(rec.status) then
    return nil, {'err', 'bad_state', rec.status}
  end
  if rec.worker_id ~= worker then
    return nil, {'err', 'not_owner', rec.worker_id}
  end
  if expected ~= '' and tonumber(expected) ~= rec.version then
    return nil, {'err', 'version', int(rec.version)}
  end
  return raw, rec
end
