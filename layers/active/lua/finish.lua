-- Finish a partition and claim the next, atomically: one round trip a partition for a worker that
-- keeps several in hand (the runtime's task window, `layers/active/window.py`). The finish is
-- complete.lua's, the claim claim.lua's, the partition claimed also started: they are the same
-- functions (`_complete.lua`, `_claim.lua`), so every guarantee of the separate steps holds (the
-- exactly-once hand-off to the archive queue, the archival switch and its share, a stale lease
-- taken over, Go's records byte for byte, typed refusals). A failure is finished by
-- finish_failed.lua, which takes the same KEYS and ARGV.
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] done bitmap   KEYS[4] archive queue stream
-- KEYS[5] the archival switch   KEYS[6] pids held   KEYS[7] the SDK's completion latency hash
-- KEYS[8] pending zset   KEYS[9] failed zset   KEYS[10] retries zset (pid -> when, unix ms)
-- KEYS[11] attempts hash (pid -> failures counted by a retry policy)
-- KEYS[12] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] what to finish: 'complete', or '' (nothing: a claim alone)
-- ARGV[2] its pid   ARGV[3] worker_id as JSON text   ARGV[4] now (unix s)   ARGV[5] now (unix ms)
-- ARGV[6] now as RFC 3339 JSON text ('' where no Go record is expected: a step meeting one answers
--         'elk_time')
-- ARGV[7] 'claim' to claim and start the next partition, '' not to
-- ARGV[8], ARGV[9] claim.lua's ARGV[4], ARGV[5]: the stale lease cutoff (unix ms; '' = do not look
--         this time), minus it
-- ARGV[10], ARGV[11] complete.lua's ARGV[7], ARGV[8]: completion latencies handed ('' = none)
-- ARGV[12] complete.lua's ARGV[9]: the record as the caller's last step on it answered ('' = not known)
-- ARGV[13..17] finish_failed.lua's (not read here)
-- Returns the finish's refusal, with nothing written and nothing claimed: {'err', code, detail} |
-- {'upgrade'} (the record is in no layout of `_layout.lua`) | {'elk_time'} (a Go record, no ARGV[6]);
-- or {finished, next}: finished is complete.lua's answer ('<entry id> <archived JSON>' | {'held',
-- record} | {'already'}), or '' (nothing finished); next is claim.lua's answer for a record claimed
-- and started (status running), or '' without ARGV[7]. A claim refused after the finish leaves the
-- finish done: each is all or nothing. A completion drops the failures counted in KEYS[11].
-- include: _checks.lua, _complete.lua, _claim.lua
local what, pid, worker = ARGV[1], ARGV[2], ARGV[3]
local now_s, now_ms, now_elk = ARGV[4], ARGV[5], ARGV[6]
local go = KEYS[12]
local finished = ''

if what == 'complete' then
  local counted, refused = typed_call('hash', 'HEXISTS', KEYS[11], pid)
  if refused then
    return refused
  end
  finished = complete_partition({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], go},
    {pid, worker, now_s, now_elk, '', now_ms, ARGV[10], ARGV[11], ARGV[12]})
  local answer = type(finished) == 'table' and finished[1]
  if answer and answer ~= 'held' and answer ~= 'already' then
    return finished
  end
  if counted == 1 and answer ~= 'already' then
    redis.call('HDEL', KEYS[11], pid)
  end
end

if ARGV[7] ~= 'claim' then
  return {finished, ''}
end
return {finished, claim_partition({KEYS[1], KEYS[8], KEYS[2], go},
  {worker, now_ms, now_s, ARGV[8], ARGV[9], now_elk}, 'running')}
