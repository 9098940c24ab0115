"""The Lua scripts the Redis engine runs on the server: each is one atomic step, and together
with the hash tags (every key of a domain in one slot) they keep the consistency contract in
Redis Cluster too (docs/engine-redis.md, docs/design.md §3)."""

# KEYS: rev, log, scopes[, domains], then per op: scope hash, history hash; then per check
#       (an entry compared, not written): its scope hash; then, with charges, the domain's
#       quota hash.
# ARGV: fresh epoch, log limit, number of fixed keys, domain, number of checks, number of
#       charges, then per op: skill, expected version, manifest JSON, scope, op, new version,
#       actor, message; then per check: skill, expected version; then per charge: counter,
#       bytes, limit (-1: none); then, in Cluster, the channel the domain is published on
#       once committed (wakes `changes_many`).
# A manifest's version and deleted flag are read from the head of its JSON, which is written
# in the model's field order (skill, version, commit_id, committed_at, deleted; a quote inside
# a JSON string is always escaped, so the pattern cannot match inside one): decoding a large
# manifest whole would cost the script ~10 ms per MB. Any other shape is decoded.
# Reads and checks everything before the first write, so a mismatch ({0, op, version}), a
# deletion of a skill that is not live ({2, op, version}), a moved check ({3, check, version})
# or a charge past its quota ({4, charge, bytes held}) writes nothing. The epoch
# changes when the server's replication ID differs from the one the revision was written under:
# after a failover or a restart this server's history may lack writes others saw, and counters
# that overtook the lost ones must not look like the same revisions to a follower.
_HEAD = (
    """'^{"skill":"[^"]*","version":(%d+),"commit_id":".-",'"""
    """ .. '"committed_at":[^,]*,"deleted":(%a+),'"""
)
COMMIT = """#!lua
local nfixed = tonumber(ARGV[3])
local nchecks = tonumber(ARGV[5])
local ncharges = tonumber(ARGV[6])
local quota = KEYS[#KEYS]
local n = (#KEYS - nfixed - nchecks - (ncharges > 0 and 1 or 0)) / 2
local olds = {}
local function state(old)
  local v, d = string.match(old, HEAD)
  if not v then
    local m = cjson.decode(old)
    return m['version'], not m['deleted']
  end
  return tonumber(v), d == 'false'
end
for i = 1, n do
  local a = 6 + (i - 1) * 8
  local old = redis.call('HGET', KEYS[nfixed + 2 * i - 1], ARGV[a + 1])
  local v, live = 0, false
  if old then v, live = state(old) end
  if v ~= tonumber(ARGV[a + 2]) then return {0, i, v} end
  if ARGV[a + 5] == 'remove' and not live then return {2, i, v} end
  olds[i] = {old, v}
end
for j = 1, nchecks do
  local c = 6 + n * 8 + (j - 1) * 2
  local old = redis.call('HGET', KEYS[nfixed + 2 * n + j], ARGV[c + 1])
  local v = 0
  if old then v = state(old) end
  if v ~= tonumber(ARGV[c + 2]) then return {3, j, v} end
end
local q0 = 6 + n * 8 + nchecks * 2
for k = 1, ncharges do
  local q = q0 + (k - 1) * 3
  local used = tonumber(redis.call('HGET', quota, ARGV[q + 1]) or '0')
  local add, limit = tonumber(ARGV[q + 2]), tonumber(ARGV[q + 3])
  if limit >= 0 and add > 0 and used + add > limit then return {4, k, used} end
end
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
local rev = redis.call('HMGET', KEYS[1], 'epoch', 'counter', 'replid')
local epoch = rev[1]
if not epoch or rev[3] ~= replid then epoch = ARGV[1] end
local counter = tonumber(rev[2] or '0')
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if last then counter = math.max(counter, tonumber(string.match(last[1], '^(%d+)'))) end
counter = counter + 1
local c = string.format('%d', counter)
redis.call('HSET', KEYS[1], 'epoch', epoch, 'counter', c, 'replid', replid)
for k = 1, ncharges do
  local q = q0 + (k - 1) * 3
  redis.call('HINCRBY', quota, ARGV[q + 1], ARGV[q + 2])
end
for i = 1, n do
  local a = 6 + (i - 1) * 8
  if olds[i][1] then
    redis.call('HSET', KEYS[nfixed + 2 * i], string.format('%d', olds[i][2]), olds[i][1])
  end
  redis.call('HSET', KEYS[nfixed + 2 * i - 1], ARGV[a + 1], ARGV[a + 3])
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], c .. '-' .. (i - 1),
             'scope', ARGV[a + 4], 'skill', ARGV[a + 1], 'op', ARGV[a + 5], 'version', ARGV[a + 6],
             'actor', ARGV[a + 7], 'message', ARGV[a + 8])
  redis.call('SADD', KEYS[3], ARGV[a + 4])
end
if nfixed == 4 then redis.call('SADD', KEYS[4], ARGV[4]) end
local channel = ARGV[q0 + ncharges * 3 + 1]
if channel then redis.call('PUBLISH', channel, ARGV[4]) end
return {1, counter, epoch}
""".replace("HEAD", _HEAD)

# KEYS: rev, log. ARGV: since epoch, since counter, most commits to return.
# Returns {0} (domain never written, `since` empty), {1, epoch, counter, entries}
# or {2, epoch, counter} (reset).
# When to reset is the rule of `must_reset` in skillfs/engines/base.py, read atomically here.
# Entries are whole commits: a follower moves `since` to a commit's revision after reading it.
CHANGES = """#!lua flags=no-writes
local rev = redis.call('HMGET', KEYS[1], 'epoch', 'counter')
if not rev[1] then
  if ARGV[1] ~= '' then return {2, '', 0} end
  return {0}
end
local counter = tonumber(rev[2])
local since = tonumber(ARGV[2])
if rev[1] ~= ARGV[1] or counter < since then return {2, rev[1], counter} end
if counter == since then return {1, rev[1], counter, {}} end
local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
if not first then return {2, rev[1], counter} end
local fc, fs = string.match(first[1], '^(%d+)-(%d+)$')
fc, fs = tonumber(fc), tonumber(fs)
if fc > since + 1 or (fc == since + 1 and fs > 0) then return {2, rev[1], counter} end
local entries = redis.call('XRANGE', KEYS[2], string.format('%d-0', since + 1),
                           string.format('%d-18446744073709551615', since + tonumber(ARGV[3])))
return {1, rev[1], counter, entries}
"""

# KEYS: the blob's meta key. ARGV: cutoff, the prefix of its chunk keys (same hash tag, so the
# same slot: Redis 7 lets a script reach undeclared keys of its own slot). It only deletes, so
# it may run over maxmemory (`allow-oom`): GC is how an operator frees a full store.
DELETE_BLOB = """#!lua flags=allow-oom
local t = redis.call('GET', KEYS[1])
if not t or tonumber(t) >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
local i = 0
while redis.call('UNLINK', ARGV[2] .. i) == 1 do i = i + 1 end
return 1
"""

# KEYS: a domain's quota hash. ARGV: counter, bytes, limit (-1: none). The bytes added unless
# they take the counter past its limit: then nothing, and the counter's bytes are returned.
CHARGE = """#!lua
local used = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local add, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
if limit >= 0 and add > 0 and used + add > limit then return used end
if used + add < 0 then add = -used end
redis.call('HINCRBY', KEYS[1], ARGV[1], add)
return false
"""

# KEYS: a domain's quota hash. ARGV: counter, delta, counter, delta, ...: each counter moved by
# its delta, never below 0 (GC's re-count).
ADJUST = """#!lua
for i = 1, #ARGV, 2 do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) < 0 then
    redis.call('HSET', KEYS[1], ARGV[i], 0)
  end
end
return 0
"""
