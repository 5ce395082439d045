-- The archival switch and the gray release's share, included by complete.lua and
-- release_held.lua; not a script of its own (layers/control/switch.py writes the switch).
--
-- The switch is one string (KeySchema.archival_paused), read with one GET:
--   absent           archival running, every completion archived (a share of 100)
--   {"share":N}      archival running for the share N (0..99) of the partitions
--   anything else    paused; a leading "share" member ({"share":N,"since":...}) is the share
--                    that applies again on resume (100 without one, as a pause set by hand)
-- A partition is in the share when `share_bucket` of its ID (0..99) is below N: a
-- multiplicative hash, so its cohort never changes as the share grows. layers/control/switch.py
-- computes the same bucket; every product below stays under 2^53 (IDs are below 2^32), so the
-- doubles Lua computes with are exact.

-- The partition's bucket, 0..99: the top of (pid * 2654435761) mod 2^32, scaled to 100.
local function share_bucket(pid)
  local n = tonumber(pid)
  local lo = n % 65536
  local h = ((((n - lo) / 65536) * 2654435761) % 65536 * 65536 + lo * 2654435761) % 4294967296
  return math.floor(h * 100 / 4294967296)
end

-- Whether a switch that exists (`value`) lets the completion of `pid` be archived now: only a
-- running share that holds the pid's bucket. The fast path's test (one pattern, no command).
local function archives(value, pid)
  local share = tonumber(string.match(value, '^{"share":(%d+)}$'))
  return share ~= nil and share_bucket(pid) < share
end

-- The switch read (`value`, false when absent): paused (boolean) and the share (0..100).
local function switch_state(value)
  if not value then
    return false, 100
  end
  local running = tonumber(string.match(value, '^{"share":(%d+)}$'))
  if running then
    return false, math.min(running, 100)
  end
  return true, math.min(tonumber(string.match(value, '^{"share":(%d+),')) or 100, 100)
end

-- The score of a held pid in the held zset: its bucket, then its completion time (unix ms), so
-- the pids a share holds are one range of scores (`release_held.lua`). Text: Redis would turn a
-- Lua number into 14 digits.
local function held_score(pid, now_ms)
  return string.format('%.0f', share_bucket(pid) * 1e13 + tonumber(now_ms))
end
