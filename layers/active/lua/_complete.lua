-- The completion of complete.lua (its header says what it takes and answers), a function so that
-- finish.lua completes the same way: KEYS and ARGV as complete.lua's. Included by the scripts that
-- name this file in their '-- include:' line (layers/plumbing/scripts.py); not a script of its own.
-- include: _checks.lua, _layout.lua, _gostats.lua, _share.lua

-- Redis does not roll a script back when a command fails, and this script asks no key's type:
-- its writes come in an order whose every step can be undone. SETBIT first (the write a full
-- server refuses: then nothing is written), whose reply is the bit to restore; XADD, whose entry
-- can be deleted; ZREM of the lease; the active hash's write last, on the hash already read. A
-- write refused for its key's type (a foreign key in the namespace) undoes those before it.
-- Writes the completion of `pid`: queued as `entry`, or (`held_key`) kept in the active hash as
-- `entry` and held in `held_key` at `score`. Returns the queue entry's id (true when held), or
-- nil and the error reply.
local function write_completion(keys, pid, entry, held_key, score)
  local was_set, refused = typed_call('string', 'SETBIT', keys[3], pid, '1')
  if refused then
    return nil, refused
  end
  local id = true
  if not held_key then
    id, refused = typed_call('stream', 'XADD', keys[4], '*', 'p', entry)
    if refused then
      redis.call('SETBIT', keys[3], pid, was_set)
      return nil, refused
    end
  end
  refused = select(2, typed_call('zset', 'ZREM', keys[2], pid))
  if refused then
    redis.call('SETBIT', keys[3], pid, was_set)
    if not held_key then
      redis.call('XDEL', keys[4], id)
    end
    return nil, refused
  end
  if held_key then
    redis.call('HSET', keys[1], pid, entry)
    redis.call('ZADD', held_key, score, pid)
  else
    redis.call('HDEL', keys[1], pid)
  end
  return id
end

-- The archived form of a native record (`raw`) held since `claimed_at`, completed at `now`
-- (unix s): its range, from "partition_id" at index `at` to the comma before "error" at
-- `range_end`, then worker, completion and duration.
local function native_entry(raw, at, range_end, worker, claimed_at, now)
  return '{' .. string.sub(raw, at, range_end - 1) .. ',"worker_id":' .. worker .. ',"completed_at":' .. now
    .. ',"duration":' .. string.format('%d', math.max(0, now - claimed_at)) .. '}'
end

local function complete_partition(KEYS, ARGV)
  local pid, worker, expected, now = ARGV[1], ARGV[2], ARGV[5] or '', ARGV[3]
  local raw, err = typed_call('hash', 'HGET', KEYS[1], pid)
  if err then
    return err
  end

  -- a native record as a completion finds it, archived and no latencies to hand, not bound
  local version, at = native_at(raw or '', native_head('running', worker), ARGV[9])
  if not at then
    version, at = native_at(raw or '', native_head('claimed', worker), ARGV[9])
  end
  local switch, refused = typed_call('string', 'GET', KEYS[5])
  if refused then
    return refused
  end
  local handing = (ARGV[7] or '') ~= '' or (ARGV[8] or '') ~= ''
  if at and (expected == '' or tonumber(expected) == version) and not handing and not KEYS[8]
      and (not switch or archives(switch, pid)) then
    local comma = string.find(raw, ',', at + 14, true)
    local entry = native_entry(raw, comma + 1, string.find(raw, ',"error":', comma, true), worker,
      string.sub(raw, at + 14, comma - 1), now)
    local id
    id, err = write_completion(KEYS, pid, entry)
    if not id then
      return err
    end
    return id .. ' ' .. entry
  end

  -- any other case: a Go record, a completion held, latencies to hand, an error to name
  if not raw or not at then
    local bit
    bit, refused = typed_call('string', 'GETBIT', KEYS[3], pid)
    if refused then
      return refused
    end
    if not raw then
      return bit == 1 and {'already'} or {'err', 'not_found', ''}
    end
    local status = string.match(raw, '"status":"(%l+)"')
    if status == 'completed' and bit == 1 then
      return {'already'}  -- held when it completed: kept in the active hash
    end
  end
  local rec
  rec, refused = held_layout(raw, worker, expected, false)
  if not rec then
    return refused
  end
  if rec.fmt == 'elk' then
    now = ARGV[4] or ''
    if now == '' then
      return {'elk_time'}
    end
  end

  -- the latency fields this call adds to, read and checked before the first write
  local latency_fields, latency_values = {}, {}
  if KEYS[7] then
    for argv, prefix in pairs({[7] = '', [8] = 'h'}) do
      local pairs_text, sum_us = string.match(ARGV[argv] or '', '^([%d:,]+);(%d+)$')
      if pairs_text then
        for bucket, count in string.gmatch(pairs_text, '(%d+):(%d+)') do
          latency_fields[#latency_fields + 1] = prefix .. 'b' .. bucket
          latency_values[#latency_values + 1] = count
        end
        latency_fields[#latency_fields + 1] = prefix .. 'sum_us'
        latency_values[#latency_values + 1] = sum_us
      end
    end
  end
  if #latency_fields > 0 then
    local stored
    stored, refused = typed_call('hash', 'HMGET', KEYS[7], unpack(latency_fields))
    if refused then
      return refused
    end
    for _, value in ipairs(stored) do
      if value and not string.match(value, '^%d+$') then
        latency_fields = {}
        break
      end
    end
  end
  local plan
  plan, err = go_stats_read(KEYS[8], rec.status, 'completed')
  if not plan then
    return err
  end

  -- the record as kept when held, and as a Go record's queue entry
  local kept
  if rec.fmt == 'native' then
    kept = native_record(raw, rec.at, 'completed', worker, string.format('%d', rec.version), now, rec.heartbeat,
      rec.claimed_at)
  else
    kept = string.sub(raw, 1, rec.w_end) .. ',"last_heartbeat":' .. rec.heartbeat
      .. ',"status":"completed","updated_at":' .. now .. ',' .. string.sub(raw, rec.mid)
  end
  local held_key, entry, score = nil, kept, nil
  local paused, share = switch_state(switch)
  if paused or share_bucket(pid) >= share then
    held_key = KEYS[6]
    if not held_key or (ARGV[6] or '') == '' then
      return {'paused'}
    end
    refused = select(2, typed_call('zset', 'ZSCORE', held_key, pid))
    if refused then
      return refused
    end
    score = held_score(pid, ARGV[6])
  elseif rec.fmt == 'native' then
    entry = native_entry(raw, rec.at, rec.e, worker, rec.claimed_at, now)
  end
  local id
  id, err = write_completion(KEYS, pid, entry, held_key, score)
  if not id then
    return err
  end
  for i, field in ipairs(latency_fields) do
    redis.call('HINCRBY', KEYS[7], field, latency_values[i])
  end
  go_stats_write(plan)
  if held_key then
    return {'held', entry}
  end
  return id .. ' ' .. entry
end
