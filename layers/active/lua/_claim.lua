-- The claim of claim.lua (its header says what it takes and answers), a function so that finish.lua
-- claims the same way: KEYS and ARGV as claim.lua's; `status` is what the claimed record becomes,
-- 'claimed', or 'running' for a partition claimed and started at once (its lease's score then
-- minus now, as start.lua leaves it). Included by the scripts that name this file in their
-- '-- include:' line (layers/plumbing/scripts.py); not a script of its own.
-- include: _checks.lua, _layout.lua, _time.lua, _gostats.lua

local function claim_partition(KEYS, ARGV, status)
  local worker = ARGV[1]
  local err
  local score = status == 'running' and '-' .. ARGV[2] or ARGV[2]

  -- the lowest pending partition, a native record as claims find it
  if ARGV[4] == '' and not KEYS[4] then
    local popped
    popped, err = typed_call('zset', 'ZPOPMIN', KEYS[2])
    if err then
      return err
    end
    if #popped == 0 then
      return {'none'}
    end
    local pid = popped[1]
    local raw
    raw, err = typed_call('hash', 'HGET', KEYS[1], pid)
    local version, rest
    if raw then
      version, rest = native_at(raw, '{"status":"pending","worker_id":"","version":')
      rest = rest and string.find(raw, ',', rest + 1, true)  -- the comma before "partition_id"
    end
    if rest then
      local now = ARGV[3]
      local out = native_head(status, worker) .. string.format('%d', version + 1) .. ',"updated_at":' .. now .. ',"last_heartbeat":'
        .. now .. ',"claimed_at":' .. now .. string.sub(raw, rest)
      redis.call('HSET', KEYS[1], pid, out)
      redis.call('ZADD', KEYS[3], score, pid)
      return out
    end
    redis.call('ZADD', KEYS[2], popped[2], pid)  -- not a pending native record: the general way
    if err then
      return err
    end
  end

  -- any other case: a stale lease, a Go record, an index entry out of step with its record
  local stale, pending = {}, nil
  if ARGV[4] ~= '' then
    stale, err = typed_call('zset', 'ZRANGEBYSCORE', KEYS[3], ARGV[5], ARGV[4], 'LIMIT', '0', '20')
    if err then
      return err
    end
  end
  local cutoff = tonumber(ARGV[4] ~= '' and ARGV[4] or '0')

  -- the pids met whose records are in no layout: answered for upgrade.lua, before anything is claimed
  local upgrade = {'upgrade'}

  -- the record of pid and its layout, or nil and what to do with the index entry: 'drop' it,
  -- 'upgrade' it (listed in `upgrade`), or the reply to return
  local function candidate(pid)
    local raw, refused = typed_call('hash', 'HGET', KEYS[1], pid)
    if refused then
      return nil, refused
    end
    if not raw then
      return nil, 'drop'
    end
    local rec = layout_of(raw)
    if rec then
      rec.raw = raw
      return rec
    end
    upgrade[#upgrade + 1] = pid
    return nil, 'upgrade'
  end

  local function lease_score(rec)
    local beat = rec.fmt == 'elk' and (rfc3339_ms(rec.heartbeat) or 0) or tonumber(rec.heartbeat) * 1000
    return rec.status == 'running' and -beat or beat, beat
  end

  local chosen, chosen_pid, from_pending
  for _, pid in ipairs(stale) do
    local rec, why = candidate(pid)
    if type(why) == 'table' then
      return why
    elseif why == 'drop' or (rec and rec.status ~= 'claimed' and rec.status ~= 'running') then
      redis.call('ZREM', KEYS[3], pid)
    elseif rec then
      local score, beat = lease_score(rec)
      if beat > cutoff then
        redis.call('ZADD', KEYS[3], score, pid)
      else
        chosen, chosen_pid = rec, pid
        break
      end
    end
  end

  local first, window = 0, 0
  while not chosen and first <= 20 do
    pending, err = typed_call('zset', 'ZRANGE', KEYS[2], first, first + window)
    if err then
      return err
    end
    if #pending == 0 then
      break
    end
    local removed = 0
    for _, pid in ipairs(pending) do
      local rec, why = candidate(pid)
      if type(why) == 'table' then
        return why
      elseif why == 'drop' or (rec and rec.status ~= 'pending') then
        redis.call('ZREM', KEYS[2], pid)
        removed = removed + 1
        if rec and (rec.status == 'claimed' or rec.status == 'running') then
          redis.call('ZADD', KEYS[3], (lease_score(rec)), pid)
        end
      elseif rec then
        chosen, chosen_pid, from_pending = rec, pid, true
        break
      end
    end
    first, window = first + window + 1 - removed, 19
  end
  if #upgrade > 1 then
    return upgrade
  end
  if not chosen then
    return {'none'}
  end

  local plan
  plan, err = go_stats_read(KEYS[4], chosen.status, status)
  if not plan then
    return err
  end
  local now = chosen.fmt == 'elk' and (ARGV[6] or '') or ARGV[3]
  if now == '' then
    return {'elk_time'}
  end
  local out = spliced(chosen.raw, chosen, status, worker, now, now, now)
  redis.call('HSET', KEYS[1], chosen_pid, out)
  if from_pending then
    redis.call('ZREM', KEYS[2], chosen_pid)
  end
  redis.call('ZADD', KEYS[3], score, chosen_pid)
  go_stats_write(plan)
  return out
end
