-- A failed partition made pending again, as retry_failed.lua and beat.lua (a retry policy's back-off
-- over) do it. Included by the scripts that name this file in their '-- include:' line
-- (layers/plumbing/scripts.py); not a script of its own.
-- include: _record.lua

-- The record of failed partition `pid` in `hash` as pending again (no worker, no error; a Go record
-- also loses options.error and its heartbeat, as Go's retry leaves it), `now` as its format writes
-- it (clock = {s = unix s, elk = RFC 3339 JSON text}); nothing is written. Or nil and why: 'gone' (no
-- record, or it is not failed any more: its index entry is to go) or 'corrupt' (it stays as it is).
local function retried_record(hash, pid, clock)
  local rec, why = load_record(hash, pid)
  if not rec then
    return nil, why == 'not_found' and 'gone' or 'corrupt'
  end
  if rec.status ~= 'failed' then
    return nil, 'gone'
  end
  local options
  if rec.fmt == 'elk' then
    options = with_option(rec.raw.options, 'error', nil)
    if not options then
      return nil, 'corrupt'
    end
  end
  set(rec, 'status', '"pending"')
  set(rec, 'worker_id', '""')
  set(rec, 'error', '""')
  bump_version(rec)
  set(rec, 'updated_at', now_text(rec, clock))
  if rec.fmt == 'elk' then
    set(rec, 'options', options)
    set(rec, 'last_heartbeat', ZERO_TIME)
  end
  return encode_record(rec)
end

-- The failed partitions among `pids` of `hash` made pending again (`retried_record`), read and
-- checked, nothing written: {{pid, record}, ...}, and the pids whose index entries are to go (no
-- record, or not failed any more).
local function retries_of(hash, pids, clock)
  local back, gone = {}, {}
  for _, pid in ipairs(pids) do
    local out, why = retried_record(hash, pid, clock)
    if out then
      back[#back + 1] = {pid, out}
    elseif why == 'gone' then
      gone[#gone + 1] = pid
    end
  end
  return back, gone
end

-- Writes what `retries_of` made: each record back in `hash`, out of the `failed` index, into `pending`.
local function write_retries(hash, failed, pending, back)
  for _, item in ipairs(back) do
    local pid = item[1]
    redis.call('HSET', hash, pid, item[2])
    redis.call('ZREM', failed, pid)
    redis.call('ZADD', pending, tonumber(pid), pid)
  end
end
