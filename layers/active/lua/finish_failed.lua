-- Fail a partition and claim the next, atomically: finish.lua for a partition whose processing
-- failed (same KEYS and ARGV). The failure is fail.lua's (`_fail.lua`), with a retry policy's
-- bookkeeping; the claim claim.lua's, the partition claimed also started (`_claim.lua`).
-- KEYS[1..12] as finish.lua's
-- ARGV[1] 'fail'   ARGV[2..12] as finish.lua's (ARGV[6], Go's time, always given here)
-- ARGV[13] the error as JSON text
-- ARGV[14] the retry policy's attempts in all ('' = no policy: the partition stays failed)
-- ARGV[15] its first back-off (ms)   ARGV[16] the longest back-off (ms)   ARGV[17] the jitter's draw (0..1)
-- Returns fail.lua's refusal ({'err', code, detail}: nothing written, nothing claimed), or
-- {{'failed', record, attempts, retry at (unix ms) or ''}, next} with next as finish.lua's.
-- A failure with a policy counts the partition's failures in KEYS[11]; all but the last attempt's
-- put it in KEYS[10] at now + min(longest, first * 2^(failures - 1)) * (0.5 + draw / 2), when
-- beat.lua sends it back to pending. Everything the failure reads is checked before its first write.
-- include: _checks.lua, _fail.lua, _claim.lua
local pid, worker = ARGV[2], ARGV[3]
local now_s, now_ms, now_elk = ARGV[4], ARGV[5], ARGV[6]
local go = KEYS[12]
local policy, attempts, refused = ARGV[14] ~= '', 0, nil
if policy then
  local counted
  counted, refused = typed_call('hash', 'HGET', KEYS[11], pid)
  if refused then
    return refused
  end
  attempts = tonumber(counted or '0') or 0
  refused = select(2, typed_call('zset', 'ZSCORE', KEYS[10], pid))
  if refused then
    return refused
  end
end
local failed = fail_partition({KEYS[1], KEYS[2], KEYS[9], go}, {pid, cjson.decode(worker), '', now_s, now_elk, ARGV[13]})
if failed[1] ~= 'ok' then
  return failed
end
local retry_at = ''
if policy then
  attempts = attempts + 1
  redis.call('HSET', KEYS[11], pid, string.format('%d', attempts))
  if attempts < tonumber(ARGV[14]) then
    local backoff = math.min(tonumber(ARGV[16]), tonumber(ARGV[15]) * 2 ^ (attempts - 1))
    retry_at = string.format('%d', tonumber(now_ms) + math.floor(backoff * (0.5 + tonumber(ARGV[17]) / 2)))
    redis.call('ZADD', KEYS[10], retry_at, pid)
  end
end
local finished = {'failed', failed[2], attempts, retry_at}

if ARGV[7] ~= 'claim' then
  return {finished, ''}
end
return {finished, claim_partition({KEYS[1], KEYS[8], KEYS[2], go},
  {worker, now_ms, now_s, ARGV[8], ARGV[9], now_elk}, 'running')}
