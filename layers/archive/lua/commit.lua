-- Commit archived partitions, exactly once: set their index bits, count the new ones, move
-- the tier up when the total crosses a threshold, apply their statistics, write their detail
-- when it travels with the commit, and acknowledge + delete their queue entries, all in one
-- step (the entries are trimmed off the queue's head when they are all before the oldest
-- unacknowledged one, deleted one by one otherwise). If any counted partition already has its index bit (a redelivered entry), nothing is
-- written and the duplicates are returned, so the caller can rebuild the statistics without
-- them and move them to the ack-only list. The caller's side of this contract is
-- layers/archive/commit.py. This runs for every archived partition, so the caller does the per-partition
-- work: it sends the page's index bits as the bytes to OR into the bitmap (when they lie within
-- 4,000 bytes of it, as a page of completions does), entry ids as comma-separated lists, and the
-- statistics grouped by key, so that here the loops go over bytes and fields, not partitions.
-- Range hashes name workers by their registry number: the numbers are those of the registry
-- generation in ARGV[11], and if the registry holds another one (it was lost and rebuilt since
-- the caller read it), nothing is written.
-- KEYS[1] index bitmap   KEYS[2] archive queue   KEYS[3] archive meta hash
-- KEYS[4] worker registry (worker_id -> short number; its field '' is the generation)
-- KEYS[5] the simple tier's hash (pid -> JSON)   KEYS[6] batches stored unsealed (zset)
-- KEYS[7..] statistics hashes (the segments below address them by position in KEYS)
-- ARGV[1] consumer group   ARGV[2] compressed_from   ARGV[3] summary_above
-- ARGV[4] how many partitions are counted (each given once: the caller's dedupe)
-- ARGV[5] how their index bits come: 'bytes' or 'bits'
-- ARGV[6] 'bytes': the offset of the first byte in the bitmap; 'bits': the pids, comma-separated
-- ARGV[7] 'bytes': the bytes whose set bits are the counted pids (from that offset on); else ''
-- ARGV[8] their queue entry ids, comma-separated ('' for an import, which has no entries)
-- ARGV[9] entry ids to acknowledge only, comma-separated ('' if none)
-- ARGV[10] the largest counted pid (0 if none)
-- ARGV[11] the registry generation the worker numbers of the statistics belong to ('' when none)
-- ARGV[12] where the counted partitions' detail goes: '' (written already), 'simple' (into KEYS[5])
--          or 'unsealed' (into KEYS[5], a batch tier's records kept unsealed in a critical backlog)
-- ARGV[13] with 'unsealed': 'now_ms,batch,batch,...' for KEYS[6] ('' otherwise)
-- ARGV[14] the newest of the entry ids of ARGV[8] and ARGV[9] ('' if none)
-- ARGV[15 .. 14+2n] with a detail: pid, detail JSON, for each counted partition
-- then statistics segments until the end, one per hash: its KEYS index, a, b, c (how many fields
--          it adds to, keeps the minimum of, keeps the maximum of), the a+b+c field names in that
--          order, then their a+b+c values. Sums are exact whatever the size (_decimal.lua): past
--          2^63 they are kept as decimal text.
-- Returns {'dup', pid...} or {'ok', total archived, tier, n}; {'stale_workers'},
-- {'err', 'wrong_type', what} or {'err', 'corrupt_meta', field} (nothing written) when the
-- registry changed, or a key or the meta hash is not ours.
-- The tier rule mirrors layers/archive/tiers.py TierPolicy.tier_after: simple below compressed_from,
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

-- The index bits given as bytes to OR in from byte `first` on: the pids whose bit is set already,
-- and a function that sets them all. Bytes where only one side has bits (nearly all of them) are
-- taken whole; only a byte both have bits in is looked at bit by bit.
local function index_bytes(first, mask)
  local raw, bad = typed_call('string', 'GETRANGE', KEYS[1], first, first + #mask - 1)
  if not raw then
    return nil, bad
  end
  local old, new = {string.byte(raw, 1, -1)}, {string.byte(mask, 1, -1)}
  local dups = {}
  for j = 1, #new do
    local e, m = old[j] or 0, new[j]
    if m == 0 then
      new[j] = e
    elseif e ~= 0 then
      local weight = 128
      for bit = 0, 7 do
        local had, wanted = math.floor(e / weight) % 2 == 1, math.floor(m / weight) % 2 == 1
        if had and wanted then
          dups[#dups + 1] = string.format('%d', (first + j - 1) * 8 + bit)
        elseif had then
          m = m + weight
        end
        weight = weight / 2
      end
      new[j] = m
    end
  end
  return dups, function()
    redis.call('SETRANGE', KEYS[1], first, string.char(unpack(new)))
  end
end

-- The index bits of scattered pids, through BITFIELD, 1,000 GET/SET a call: as index_bytes.
local function index_bits(pids)
  local dups, sets = {}, {}
  for first = 1, #pids, 1000 do
    local get, set = {}, {}
    for i = first, math.min(#pids, first + 999) do
      get[#get + 1], get[#get + 2], get[#get + 3] = 'GET', 'u1', pids[i]
      set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = 'SET', 'u1', pids[i], 1
    end
    sets[#sets + 1] = set
    local bits, bad = typed_call('string', 'BITFIELD', KEYS[1], unpack(get))
    if not bits then
      return nil, bad
    end
    for k, bit in ipairs(bits) do
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

-- a stream entry id as two numbers, or nil when a part is too long to be exact as one
local function stream_id(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  if not ms or #ms > 15 or #seq > 15 then
    return nil
  end
  return tonumber(ms), tonumber(seq)
end

-- Acknowledge the entries (`newest`: the newest of them) and take them out of the queue. The
-- group reads the queue from its start, in order, so every entry before its oldest unacknowledged one is
-- acknowledged: when all of ours lie before it (the usual case: the next page is read before this
-- commit runs), one XTRIM MINID drops them with the rest of that run, whole stream nodes at a
-- time, instead of an XDEL of each; otherwise (nothing left pending, or an older page pending
-- elsewhere) each is deleted.
local function ack(ids, newest)
  if #ids == 0 then
    return
  end
  for first = 1, #ids, 1000 do
    redis.call('XACK', KEYS[2], ARGV[1], unpack(ids, first, math.min(#ids, first + 999)))
  end
  local oldest = redis.call('XPENDING', KEYS[2], ARGV[1])[2]
  local ms, seq = stream_id(newest)
  if oldest and ms then
    local oldest_ms, oldest_seq = stream_id(oldest)
    if oldest_ms and (ms < oldest_ms or (ms == oldest_ms and seq < oldest_seq)) then
      redis.call('XTRIM', KEYS[2], 'MINID', oldest)
      return
    end
  end
  for first = 1, #ids, 1000 do
    redis.call('XDEL', KEYS[2], unpack(ids, first, math.min(#ids, first + 999)))
  end
end

-- keys written without being read first are checked by TYPE; the others by their reads
local kinds = {'', 'stream', '', '', '', ''}
if ARGV[12] ~= '' then
  kinds[5] = 'hash'
end
if ARGV[12] == 'unsealed' then
  kinds[6] = 'zset'
end
local bad_type = wrong_type(KEYS, kinds)
if bad_type then
  return bad_type
end
if ARGV[11] ~= '' then
  local generation, bad = typed_call('hash', 'HGET', KEYS[4], '')
  if bad then
    return bad
  end
  if generation ~= ARGV[11] then
    return {'stale_workers'}
  end
end
local rank = {simple = 1, compressed = 2, summary = 3}
local meta, bad_meta = typed_call('hash', 'HMGET', KEYS[3], 'max_pid', 'total', 'tier')
if not meta then
  return bad_meta
end
for i, field in ipairs({'max_pid', 'total'}) do
  if meta[i] and not string.match(meta[i], '^%d+$') then
    return {'err', 'corrupt_meta', field}
  end
end
if meta[3] and not rank[meta[3]] then
  return {'err', 'corrupt_meta', 'tier'}
end
local n = tonumber(ARGV[4])
local first_segment = 15
if ARGV[12] ~= '' then
  first_segment = 15 + 2 * n
end
-- every statistics field the segments touch, one HMGET per hash: checked here, reused below
local segments = {}
local at = first_segment
while at <= #ARGV do
  local k, adds, mins = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local count = adds + mins + tonumber(ARGV[at + 3])
  local names = at + 4
  local olds = {}
  for first = 0, count - 1, 500 do -- well inside Lua's limit on unpacked arguments
    local last = math.min(count, first + 500) - 1
    local values, bad = typed_call('hash', 'HMGET', KEYS[k], unpack(ARGV, names + first, names + last))
    if not values then
      return bad
    end
    for j = 1, last - first + 1 do
      olds[first + j] = values[j]
    end
  end
  for j = 1, count do
    local old = olds[j]
    if old and not (string.match(old, '^%-?%d+$') or (j > adds and tonumber(old))) then
      return {'err', 'corrupt_meta', KEYS[k] .. ' ' .. ARGV[names + j - 1]}
    end
  end
  segments[#segments + 1] = {k, adds, adds + mins, count, names, olds}
  at = names + 2 * count
end
local dups, set_index_bits
if ARGV[5] == 'bytes' then
  dups, set_index_bits = index_bytes(tonumber(ARGV[6]), ARGV[7])
else
  dups, set_index_bits = index_bits(split(ARGV[6]))
end
if not dups then
  return set_index_bits
end
if #dups > 0 then
  table.insert(dups, 1, 'dup')
  return dups
end
local meta_max = tonumber(meta[1] or '0')
local max_pid = math.max(meta_max, tonumber(ARGV[10]))
set_index_bits()
if ARGV[12] ~= '' then
  for first = 15, 14 + 2 * n, 1000 do
    redis.call('HSET', KEYS[5], unpack(ARGV, first, math.min(14 + 2 * n, first + 999)))
  end
  if ARGV[12] == 'unsealed' then
    local batches = split(ARGV[13])
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
local acked = split(ARGV[8])
for _, id in ipairs(split(ARGV[9])) do
  acked[#acked + 1] = id
end
ack(acked, ARGV[14])
for _, segment in ipairs(segments) do
  local k, adds, last_min, count, names, olds = unpack(segment)
  local out, m = {}, 0
  for j = 1, count do
    local value, old = ARGV[names + count + j - 1], olds[j]
    local keep = true
    if j <= adds then
      if old then
        value = decimal_add(old, value)
      end
    elseif old then
      if j <= last_min then
        keep = less(value, old)
      else
        keep = less(old, value)
      end
    end
    if keep then
      out[m + 1], out[m + 2], m = ARGV[names + j - 1], value, m + 2
    end
  end
  for first = 1, m, 1000 do -- 500 fields a call: well inside Lua's limit on unpacked arguments
    redis.call('HSET', KEYS[k], unpack(out, first, math.min(m, first + 999)))
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
