"""The budget ledger's Lua scripts: each check-and-write is one script, so concurrent runs cannot overspend.

A call's hold is made in every *layer* at once: the workspace's own ledger (layer 1) and the layers above or
beside it (an organisation's budget summed over its workspaces, one person's cap). The script checks every
layer before it writes any, so no layer can be overspent by runs racing in another.

Every script reads "now" from the Redis server (``TIME``), never from a worker: holds are swept by whichever
worker runs the next script, and workers' clocks may disagree by more than a hold's lifetime. Scripts with
``TIME`` need effects replication, the only mode since Redis 7.

A hold that lapses (its runner died, or could not reach Redis to renew it) is not given back: the call it
covered may have been made and billed, so the sweep charges it at its worst case (the held amount) and notes
that in ``lapsed``. A settle that comes later (a live runner whose renewals failed for a while) replaces that
charge by the real cost; a release leaves it (the call was cut off in flight, and may be billed whole).

KEYS: ``done`` (zset settled key -> forget-at, server ms; the workspace's), then per layer four keys:
``spent`` (string, or a zset of spenders when the layer has a member), ``held`` (hash key -> micros),
``exp`` (zset key -> expiry, server ms), ``lapsed`` (hash key -> micros charged when its hold lapsed); RESERVE
and SETTLE end with ``calib`` (the workspace's prompt-token factor, per mille: what the provider reports over
what the engine counts). RENEW and RELEASE take only the (held, exp) pairs, USAGE only the layers' four keys.
Per-layer ARGV, in layer order after the script's own: limit (-1 = none), key ttl ms, member ('' = a string).
"""

from __future__ import annotations

#: Expired holds swept per layer and script run; bounds the script's running time (Redis blocks while Lua runs).
SWEEP_BATCH = 200

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_HELPERS = (
    """
local function charge(s, member, micros)
  if micros == 0 then return end
  if member == '' then redis.call('INCRBY', s, micros) else redis.call('ZINCRBY', s, micros, member) end
end
local function sweep(s, member, h, e, l)
  local expired = redis.call('ZRANGEBYSCORE', e, '-inf', now, 'LIMIT', 0, __BATCH__)
  if #expired == 0 then return end
  local amounts = redis.call('HMGET', h, unpack(expired))
  local ttl = redis.call('PTTL', h)
  local total = 0
  for j = 1, #expired do
    local micros = tonumber(amounts[j] or '0')
    if micros > 0 then
      redis.call('HSET', l, expired[j], micros)
      total = total + micros
    end
  end
  charge(s, member, total)
  if total > 0 and ttl > 0 then
    redis.call('PEXPIRE', l, ttl)
    redis.call('PEXPIRE', s, ttl)
  end
  redis.call('HDEL', h, unpack(expired))
  redis.call('ZREM', e, unpack(expired))
end
local function spent_of(key, member)
  if member == '' then return tonumber(redis.call('GET', key) or '0') end
  return tonumber(redis.call('ZSCORE', key, member) or '0')
end
local function held_of(held)
  local sum = 0
  local vals = redis.call('HVALS', held)
  for _, v in ipairs(vals) do sum = sum + tonumber(v) end
  return sum, #vals
end
""".replace("__BATCH__", str(SWEEP_BATCH))
)

# ARGV: key, micros, hold_ms, then per layer (limit, ttl, member).
# Returns {1, 0, calib} when the hold was made in every layer, {0, i, calib} when it does not fit layer i
# (1-based; nothing held); calib is the workspace's prompt-token factor per mille (0: none learned yet).
# A hold re-made under the same key replaces the old one (a retried step), it is not counted twice.
RESERVE = (
    _NOW
    + _HELPERS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local layers = (#KEYS - 2) / 4
local micros = tonumber(ARGV[2])
local calib = tonumber(redis.call('GET', KEYS[#KEYS]) or '0')
for i = 0, layers - 1 do
  local s, h, e, l = KEYS[2 + 4 * i], KEYS[3 + 4 * i], KEYS[4 + 4 * i], KEYS[5 + 4 * i]
  local member = ARGV[6 + 3 * i]
  sweep(s, member, h, e, l)
  local limit = tonumber(ARGV[4 + 3 * i])
  if limit >= 0 then
    local held = held_of(h) - tonumber(redis.call('HGET', h, ARGV[1]) or '0')
    if spent_of(s, member) + held + micros > limit then return {0, i + 1, calib} end
  end
end
for i = 0, layers - 1 do
  local ttl = ARGV[5 + 3 * i]
  redis.call('HSET', KEYS[3 + 4 * i], ARGV[1], ARGV[2])
  redis.call('ZADD', KEYS[4 + 4 * i], now + tonumber(ARGV[3]), ARGV[1])
  for k = 2, 4 do redis.call('PEXPIRE', KEYS[k + 4 * i], ttl) end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {1, 0, calib}
"""
)

# KEYS: (held, exp) per layer.  ARGV: key, hold_ms.  Returns 1 when the hold was extended to now + hold_ms in
# every layer, 0 when it is gone (settled, released or already swept in the workspace's layer): a hold is never
# brought back, or a lapsed one would be counted after the budget was handed to other runs.
RENEW = (
    _NOW
    + """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
if exp == false or tonumber(exp) <= now then return 0 end
for i = 0, #KEYS / 2 - 1 do
  if redis.call('HEXISTS', KEYS[1 + 2 * i], ARGV[1]) == 1 then
    redis.call('ZADD', KEYS[2 + 2 * i], now + tonumber(ARGV[2]), ARGV[1])
  end
end
return 1
"""
)

# ARGV: key, actual, done_keep_ms, then per layer (limit, ttl, member) (the limit unused here), then the call's
# prompt-token factor per mille (0: the provider reported no prompt tokens), kept as the workspace's.
# Returns 2 when the hold was settled, 1 when the hold had already lapsed (its worst-case charge is replaced by
# the actual cost) or was never seen (the actual cost is recorded: the provider charged it), 0 when this key
# was settled already (a repeated settle records nothing).
SETTLE = (
    _NOW
    + """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local had = redis.call('HEXISTS', KEYS[3], ARGV[1])
for i = 0, (#KEYS - 2) / 4 - 1 do
  local s, h, e, l = KEYS[2 + 4 * i], KEYS[3 + 4 * i], KEYS[4 + 4 * i], KEYS[5 + 4 * i]
  local member = ARGV[6 + 3 * i]
  local micros = tonumber(ARGV[2])
  redis.call('ZREM', e, ARGV[1])
  if redis.call('HDEL', h, ARGV[1]) == 0 then
    micros = micros - tonumber(redis.call('HGET', l, ARGV[1]) or '0')
    redis.call('HDEL', l, ARGV[1])
  end
  if micros ~= 0 then
    if member == '' then redis.call('INCRBY', s, micros) else redis.call('ZINCRBY', s, micros, member) end
  end
  for k = 2, 4 do redis.call('PEXPIRE', KEYS[k + 4 * i], ARGV[5 + 3 * i]) end
end
local factor = tonumber(ARGV[#ARGV])
if factor > 0 then redis.call('SET', KEYS[#KEYS], factor, 'PX', ARGV[5]) end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1 + had
"""
)

# KEYS: (held, exp) per layer.  ARGV: key.  Returns 1 when a hold was released, 0 when there was none (a hold
# that already lapsed stays charged: see the module's docstring).
RELEASE = """
local had = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
for i = 1, #KEYS / 2 - 1 do
  redis.call('HDEL', KEYS[1 + 2 * i], ARGV[1])
  redis.call('ZREM', KEYS[2 + 2 * i], ARGV[1])
end
return had
"""

# KEYS: (spent, held, exp, lapsed) per layer.  ARGV: member per layer.  Sweeps expired holds (charging them),
# then returns {spent, held, holds} for each layer, flat.
USAGE = (
    _NOW
    + _HELPERS
    + """
local out = {}
for i = 0, #KEYS / 4 - 1 do
  local s, h, e, l = KEYS[1 + 4 * i], KEYS[2 + 4 * i], KEYS[3 + 4 * i], KEYS[4 + 4 * i]
  sweep(s, ARGV[1 + i], h, e, l)
  local held, holds = held_of(h)
  out[#out + 1] = spent_of(s, ARGV[1 + i])
  out[#out + 1] = held
  out[#out + 1] = holds
end
return out
"""
)
