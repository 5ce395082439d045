-- Commit archived partitions, exactly once: set their index bits, count the new ones, move
-- the tier up when the total crosses a threshold, apply their statistics, write their detail
-- when it travels with the commit, and acknowledge + delete their queue entries, all in one
-- step. If any counted partition already has its index bit (a redelivered entry), nothing is
-- written and the duplicates are returned, so the caller can rebuild the statistics without
-- them and move them to the ack-only list. The caller's side of this contract is
-- stats/commit.py. Ids travel as comma-separated lists (one argument each, not one per id) and
-- the bits are read and set a byte range at a time (`index_bits`): this runs for every archived partition.
-- Range hashes name workers by their registry number: the numbers are those of the registry
-- generation in ARGV[8], and if the registry holds another one (it was lost and rebuilt since
-- the caller read it), nothing is written.
-- KEYS[1] index bitmap   KEYS[2] archive queue   KEYS[3] archive meta hash
-- KEYS[4] worker registry (worker_id -> short number; its field '' is the generation)
-- KEYS[5] the simple tier's hash (pid -> JSON)   KEYS[6] batches stored unsealed (zset)
-- KEYS[7..] statistics hashes (the ops below address them by position in KEYS)
-- ARGV[1] consumer group   ARGV[2] compressed_from   ARGV[3] summary_above
-- ARGV[4] counted pids, comma-separated
-- ARGV[5] their queue entry ids, comma-separated ('' for an import, which has no entries)
-- ARGV[6] entry ids to acknowledge only, comma-separated ('' if none)
-- ARGV[7] the largest counted pid (0 if none)
-- ARGV[8] the registry generation the worker numbers of the ops belong to ('' when none is used)
-- ARGV[9] where the counted partitions' detail goes: '' (written already), 'simple' (into KEYS[5])
--         or 'unsealed' (into KEYS[5], a batch tier's records kept unsealed in a critical backlog)
-- ARGV[10] with 'unsealed': 'now_ms,batch,batch,...' for KEYS[6] ('' otherwise)
-- ARGV[11 .. 10+n] with a detail: the detail JSON of each counted pid, in the order of ARGV[4]
-- then quads until the end: key index, op, field, value (op: '+' add, '<' keep min, '>' keep
--           max), exact whatever the size (_decimal.lua): a sum past 2^63 is kept as it is
-- Returns {'dup', pid...} or {'ok', total archived, tier, n}; {'stale_workers'},
-- {'err', 'wrong_type', what} or {'err', 'corrupt_meta', field} (nothing written) when the
-- registry changed, or a key or the meta hash is not ours.
-- The tier rule mirrors layers/tiers.py TierPolicy.tier_after: simple below compressed_from,
-- compressed from it, summary above summary_above; a stored tier never moves down.
-- include: _checks.lua, _decimal.lua

-- whether a comes before b: exactly for integers (ids pass 2^53), as numbers otherwise
local function less(a, b)
  if string.match(a, '^%-?%d+$') and string.match(b, '^%-?%d+$') then
    return decimal_cmp(a, b) < 0
  end
  return tonumber(a) < tonumber(b)
end

local function split(list)
  local out = {}
  for item in string.gmatch(list, '[^,]+') do
    out[#out + 1] = item
  end
  return out
end

-- The index bits of `pids`: the duplicates (bit set already) and a function that sets the bits.
-- Pids that lie within INDEX_SPAN bytes of the bitmap (a page of completions, nearly in order)
-- are read with one GETRANGE and written back with one SETRANGE; others go through BITFIELD,
-- 1,000 GET/SET a call. Each pid is given once (the caller's dedupe).
local INDEX_SPAN = 4000
local function index_bits(pids)
  local n = #pids
  local nums, lo, hi = {}, math.huge, -1
  for i = 1, n do
    local p = tonumber(pids[i])
    nums[i] = p
    lo, hi = math.min(lo, p), math.max(hi, p)
  end
  local dups = {}
  if n == 0 then
    return dups, function() end
  end
  local first_byte = math.floor(lo / 8)
  local span = math.floor(hi / 8) - first_byte + 1
  if span <= INDEX_SPAN then
    local raw = redis.call('GETRANGE', KEYS[1], first_byte, first_byte + span - 1)
    local bytes = {string.byte(raw, 1, -1)}
    for j = #raw + 1, span do
      bytes[j] = 0
    end
    for i = 1, n do
      local p = nums[i]
      local j = math.floor(p / 8) - first_byte + 1
      local mask = 2 ^ (7 - p % 8)
      if math.floor(bytes[j] / mask) % 2 == 1 then
        dups[#dups + 1] = pids[i]
      else
        bytes[j] = bytes[j] + mask
      end
    end
    return dups, function()
      redis.call('SETRANGE', KEYS[1], first_byte, string.char(unpack(bytes)))
    end
  end
  local sets = {}
  for first = 1, n, 1000 do
    local get, set = {}, {}
    for i = first, math.min(n, first + 999) do
      get[#get + 1], get[#get + 2], get[#get + 3] = 'GET', 'u1', pids[i]
      set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = 'SET', 'u1', pids[i], 1
    end
    sets[#sets + 1] = set
    for k, bit in ipairs(redis.call('BITFIELD', KEYS[1], unpack(get))) do
      if bit == 1 then
        dups[#dups + 1] = pids[first + k - 1]
      end
    end
  end
  return dups, function()
    for _, set in ipairs(sets) do
      redis.call('BITFIELD', KEYS[1], unpack(set))
    end
  end
end

local function ack(ids)
  for first = 1, #ids, 1000 do
    local last = math.min(#ids, first + 999)
    redis.call('XACK', KEYS[2], ARGV[1], unpack(ids, first, last))
    redis.call('XDEL', KEYS[2], unpack(ids, first, last))
  end
end

local kinds = {'string', 'stream', 'hash', 'hash', 'hash', 'zset'}
for i = 7, #KEYS do
  kinds[i] = 'hash'
end
local bad_type = wrong_type(kinds)
if bad_type then
  return bad_type
end
if ARGV[8] ~= '' and redis.call('HGET', KEYS[4], '') ~= ARGV[8] then
  return {'stale_workers'}
end
local rank = {simple = 1, compressed = 2, summary = 3}
local meta = redis.call('HMGET', KEYS[3], 'max_pid', 'total', 'tier')
for i, field in ipairs({'max_pid', 'total'}) do
  if meta[i] and not string.match(meta[i], '^%d+$') then
    return {'err', 'corrupt_meta', field}
  end
end
if meta[3] and not rank[meta[3]] then
  return {'err', 'corrupt_meta', 'tier'}
end
-- every statistics field the ops touch, one HMGET per key: checked here, reused below
local pids = split(ARGV[4])
local n = #pids
local first_op = 11
if ARGV[9] ~= '' then
  first_op = 11 + n
end
local current, fields_of = {}, {}
for i = first_op, #ARGV, 4 do
  local k = tonumber(ARGV[i])
  fields_of[k] = fields_of[k] or {}
  table.insert(fields_of[k], i)
end
for k, ops in pairs(fields_of) do
  local names = {}
  for j, i in ipairs(ops) do
    names[j] = ARGV[i + 2]
  end
  local values = {}
  for first = 1, #names, 500 do -- well inside Lua's limit on unpacked arguments
    for j, value in ipairs(redis.call('HMGET', KEYS[k], unpack(names, first, math.min(#names, first + 499)))) do
      values[first + j - 1] = value
    end
  end
  for j, i in ipairs(ops) do
    local value = values[j]
    if value and not (string.match(value, '^%-?%d+$') or (ARGV[i + 1] ~= '+' and tonumber(value))) then
      return {'err', 'corrupt_meta', KEYS[k] .. ' ' .. ARGV[i + 2]}
    end
    current[i] = value
  end
end
local dups, set_index_bits = index_bits(pids)
if #dups > 0 then
  table.insert(dups, 1, 'dup')
  return dups
end
local meta_max = tonumber(meta[1] or '0')
local max_pid = math.max(meta_max, tonumber(ARGV[7]))
set_index_bits()
if ARGV[9] ~= '' then
  for first = 1, n, 500 do
    local last = math.min(n, first + 499)
    local pairs_ = {}
    for i = first, last do
      pairs_[#pairs_ + 1] = pids[i]
      pairs_[#pairs_ + 1] = ARGV[10 + i]
    end
    redis.call('HSET', KEYS[5], unpack(pairs_))
  end
  if ARGV[9] == 'unsealed' then
    local batches = split(ARGV[10])
    local members = {}
    for i = 2, #batches do
      members[#members + 1] = batches[1]
      members[#members + 1] = batches[i]
    end
    if #members > 0 then
      redis.call('ZADD', KEYS[6], unpack(members))
    end
  end
end
ack(split(ARGV[5]))
ack(split(ARGV[6]))
local keep = {}
for i = first_op, #ARGV, 4 do
  local k, op, field, value = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local old = current[i]
  if op == '+' then
    value = decimal_add(old or '0', value)
  end
  if op == '+' or not old or (op == '<' and less(value, old)) or (op == '>' and less(old, value)) then
    keep[k] = keep[k] or {}
    table.insert(keep[k], field)
    table.insert(keep[k], value)
  end
end
for k, pairs_ in pairs(keep) do
  for first = 1, #pairs_, 1000 do -- 500 fields a call: well inside Lua's limit on unpacked arguments
    redis.call('HSET', KEYS[k], unpack(pairs_, first, math.min(#pairs_, first + 999)))
  end
end
if max_pid > meta_max then
  redis.call('HSET', KEYS[3], 'max_pid', string.format('%d', max_pid))
end
local total = redis.call('HINCRBY', KEYS[3], 'total', n)
local tier = meta[3] or 'simple'
local wanted = 'simple'
if total > tonumber(ARGV[3]) then
  wanted = 'summary'
elseif total >= tonumber(ARGV[2]) then
  wanted = 'compressed'
end
if rank[wanted] > rank[tier] then
  redis.call('HSET', KEYS[3], 'tier', wanted)
  tier = wanted
end
return {'ok', total, tier, n}
