-- Helpers for active records, included by the scripts that name this file in their '-- include:'
-- line (layers/plumbing/scripts.py); not a script of its own. These read a record in any member order and
-- write it in its format's layout (`_layout.lua`): the scripts of rarer steps (fail, retry,
-- release, upgrade) use them; the worker's hot steps splice records instead.
-- include: _time.lua, _layout.lua
--
-- A record is handled as its top-level JSON members, each kept as raw text, and never goes
-- through cjson.encode: cjson prints numbers with 14 significant digits (ids are signed
-- 64-bit) and would reorder Go's members. Two record formats share an active hash:
--   native  partarchive's own: integer Unix-second times, a claimed_at, the members a step changes first
--   elk     elk_coordinator's PartitionInfo: RFC 3339 string times, Go's member order,
--           options and error left out when empty, version from 1
-- and a record's format is told by its times. Values the caller sets arrive as JSON text
-- (strings escaped the way Go escapes them), so a Go decoder accepts everything written here.

local ZERO_TIME = '"0001-01-01T00:00:00Z"'
local NATIVE_ORDER = {'status', 'worker_id', 'version', 'updated_at', 'last_heartbeat', 'claimed_at',
                      'partition_id', 'min_id', 'max_id', 'error', 'created_at', 'options'}
local NATIVE_DEFAULT = {version = '0', error = '""', created_at = '0', updated_at = '0',
                        last_heartbeat = '0', claimed_at = '0', options = '{}', worker_id = '""'}
local ELK_ORDER = {'partition_id', 'min_id', 'max_id', 'worker_id', 'last_heartbeat', 'status',
                   'updated_at', 'options', 'version', 'error', 'created_at'}
local ELK_DEFAULT = {worker_id = '""', last_heartbeat = ZERO_TIME, updated_at = ZERO_TIME,
                     version = '0', created_at = ZERO_TIME}

local function scan_value(s, i)
  local c = string.sub(s, i, i)
  if c == '"' then
    return string_end(s, i)
  end
  if c == '{' or c == '[' then
    return container_end(s, i)
  end
  local _, e = string.find(s, '^[%w%.%+%-]+', i)
  return e
end

-- {order = member names in order, raw = name -> value text, key = name -> key text}, or nil.
local function parse_object(s)
  if type(s) ~= 'string' then
    return nil
  end
  local obj = {order = {}, raw = {}, key = {}}
  local i = string.find(s, '%S')
  if not i or string.sub(s, i, i) ~= '{' then
    return nil
  end
  i = string.find(s, '%S', i + 1)
  if i and string.sub(s, i, i) == '}' then
    return not string.find(s, '%S', i + 1) and obj or nil
  end
  while i do
    if string.sub(s, i, i) ~= '"' then
      return nil
    end
    local kend = string_end(s, i)
    if not kend then
      return nil
    end
    local keytext = string.sub(s, i, kend)
    local name = string.sub(s, i + 1, kend - 1)
    if string.find(name, '\\', 1, true) then
      local ok, decoded = pcall(cjson.decode, keytext)
      if not ok then
        return nil
      end
      name = decoded
    end
    i = string.find(s, '%S', kend + 1)
    if not i or string.sub(s, i, i) ~= ':' then
      return nil
    end
    i = string.find(s, '%S', i + 1)
    if not i then
      return nil
    end
    local vend = scan_value(s, i)
    if not vend then
      return nil
    end
    if obj.raw[name] == nil then
      table.insert(obj.order, name)
    end
    obj.raw[name] = string.sub(s, i, vend)
    obj.key[name] = keytext
    i = string.find(s, '%S', vend + 1)
    if not i then
      return nil
    end
    local c = string.sub(s, i, i)
    if c == '}' then
      return not string.find(s, '%S', i + 1) and obj or nil  -- nothing after it, as for a JSON parser
    end
    if c ~= ',' then
      return nil
    end
    i = string.find(s, '%S', i + 1)
  end
  return nil
end

local function json_text(raw)
  if raw == nil or raw == 'null' then
    return ''
  end
  if string.sub(raw, 1, 1) ~= '"' then
    return nil
  end
  if not string.find(raw, '\\', 1, true) then
    return string.sub(raw, 2, -2)
  end
  local ok, text = pcall(cjson.decode, raw)
  if ok and type(text) == 'string' then
    return text
  end
  return nil
end

local function is_int(raw)
  return raw ~= nil and string.find(raw, '^%-?%d+$') ~= nil
end

local function is_leased(status)
  return status == 'claimed' or status == 'running'
end

-- The record stored in field `pid` of `hash`, decoded, or nil and the reason.
-- rec.fmt is 'native' or 'elk'; rec.status, rec.worker, rec.version are decoded.
local function load_record(hash, pid)
  local raw = redis.call('HGET', hash, pid)
  if not raw then
    return nil, 'not_found'
  end
  local rec = parse_object(raw)
  if not rec then
    return nil, 'corrupt'
  end
  local times = rec.raw.updated_at or rec.raw.created_at or ''
  rec.fmt = (string.sub(times, 1, 1) == '"' or rec.raw.claimed_at == nil) and 'elk' or 'native'
  rec.status = json_text(rec.raw.status)
  rec.worker = json_text(rec.raw.worker_id)
  local version = rec.raw.version or (rec.fmt == 'elk' and '0' or nil)
  if not (rec.status and rec.worker and is_int(rec.raw.partition_id) and is_int(rec.raw.min_id)
          and is_int(rec.raw.max_id) and is_int(version)) then
    return nil, 'corrupt'
  end
  rec.version = tonumber(version)
  return rec
end

local function set(rec, name, text)
  rec.raw[name] = text
end

local function bump_version(rec)
  set(rec, 'version', string.format('%.0f', rec.version + 1))
end

local function empty_json(raw)
  return raw == nil or raw == 'null' or raw == '""' or string.find(raw, '^{%s*}$') ~= nil
end

local function encode_record(rec)
  local out = {}
  if rec.fmt == 'native' then
    for _, name in ipairs(NATIVE_ORDER) do
      out[#out + 1] = '"' .. name .. '":' .. (rec.raw[name] or NATIVE_DEFAULT[name])
    end
  else
    for _, name in ipairs(ELK_ORDER) do
      local v = rec.raw[name] or ELK_DEFAULT[name]
      if v == 'null' and ELK_DEFAULT[name] then
        v = ELK_DEFAULT[name]
      end
      if not ((name == 'options' or name == 'error') and empty_json(v)) then
        out[#out + 1] = '"' .. name .. '":' .. v
      end
    end
  end
  return '{' .. table.concat(out, ',') .. '}'
end

-- `options` with member `name` set to JSON text `value` (nil removes it); keys stay sorted
-- byte-wise, as Go writes maps. Returns nil if the options are not an object.
local function with_option(options, name, value)
  local obj = {order = {}, raw = {}, key = {}}
  if not empty_json(options) then
    obj = parse_object(options)
    if not obj then
      return nil
    end
  end
  if obj.raw[name] == nil and value ~= nil then
    table.insert(obj.order, name)
    table.sort(obj.order)
    obj.key[name] = cjson.encode(name)
  end
  obj.raw[name] = value
  local out = {}
  for _, k in ipairs(obj.order) do
    if obj.raw[k] ~= nil then
      out[#out + 1] = obj.key[k] .. ':' .. obj.raw[k]
    end
  end
  return '{' .. table.concat(out, ',') .. '}'
end

-- Heartbeat of a leased record in Unix ms (native: whole seconds).
local function heartbeat_ms(rec)
  if rec.fmt == 'elk' then
    return rfc3339_ms(rec.raw.last_heartbeat) or 0
  end
  return (tonumber(rec.raw.last_heartbeat) or 0) * 1000
end

-- The archive queue's entry for a completed native record: the archived form, completed at
-- `completed_at` (Unix seconds), duration = completion - claim.
local function native_archived(rec, completed_at)
  local duration = math.max(0, completed_at - (tonumber(rec.raw.claimed_at) or completed_at))
  return '{"partition_id":' .. rec.raw.partition_id
    .. ',"min_id":' .. rec.raw.min_id
    .. ',"max_id":' .. rec.raw.max_id
    .. ',"worker_id":' .. rec.raw.worker_id
    .. ',"completed_at":' .. string.format('%d', completed_at)
    .. ',"duration":' .. string.format('%d', duration) .. '}'
end

-- "now" as the record's format writes it: clock = {s = unix seconds, elk = RFC 3339 JSON text}.
local function now_text(rec, clock)
  return rec.fmt == 'elk' and clock.elk or clock.s
end

-- The claimed/running record of `pid` held by `worker`, at version `expected` ('' = any), or
-- nil and the error reply for the caller to return.
local function load_owned(hash, pid, worker, expected)
  local rec, why = load_record(hash, pid)
  if not rec then
    return nil, {'err', why, ''}
  end
  if not is_leased(rec.status) then
    return nil, {'err', 'bad_state', rec.status}
  end
  if rec.worker ~= worker then
    return nil, {'err', 'not_owner', rec.worker}
  end
  if expected ~= '' and tonumber(expected) ~= rec.version then
    return nil, {'err', 'version', string.format('%.0f', rec.version)}
  end
  return rec
end
