-- Seal a batch: replace its blob with one that also holds the staged records, and clear the
-- staging hash, unless another archiver changed either since the caller read them.
-- KEYS[1] batch string   KEYS[2] staging hash
-- ARGV[1] SHA1 of the blob the caller read ('' if none)   ARGV[2] staged count the caller read
-- ARGV[3] new blob
-- Returns 1 when sealed, 0 on a conflict (the caller reads again and retries).
-- Expiry is not set here: the summary tier's sweep deletes batches by the expiry index, so a
-- retention changed at run time applies to every batch.
local current = redis.call('GET', KEYS[1])
local digest = ''
if current then
  digest = redis.sha1hex(current)
end
if digest ~= ARGV[1] or redis.call('HLEN', KEYS[2]) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
return 1
