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
