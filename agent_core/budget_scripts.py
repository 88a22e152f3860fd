"""The budget ledger's Lua scripts: each check-and-write is one script, so concurrent runs cannot overspend.

Every script reads "now" from the Redis server (``TIME``), never from a worker: holds are swept by whichever
worker runs the next script, and workers' clocks may disagree by more than a hold's lifetime. Scripts with
``TIME`` need effects replication, the only mode since Redis 7.

KEYS of one period, always in this order: ``spent`` (string), ``held`` (hash key -> micros), ``exp`` (zset
key -> expiry, server ms), ``done`` (zset settled key -> forget-at, server ms).
"""

from __future__ import annotations

#: Expired holds swept per script run; bounds the script's running time (Redis is blocked while Lua runs).
SWEEP_BATCH = 200

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_SWEEP = """
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, __BATCH__)
if #expired > 0 then
  redis.call('HDEL', KEYS[2], unpack(expired))
  redis.call('ZREM', KEYS[3], unpack(expired))
end
""".replace("__BATCH__", str(SWEEP_BATCH))

# ARGV: key, micros, limit (-1 = no limit), hold_ms, key_ttl_ms.
# Returns {1, spent, held} when the hold was added (held includes it), {0, spent, held} when it does not fit.
# A hold re-made under the same key replaces the old one (a retried step), it is not counted twice.
RESERVE = (
    _NOW
    + _SWEEP
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
local held = 0
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do held = held + tonumber(v) end
held = held - tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local micros = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
if limit >= 0 and spent + held + micros > limit then
  return {0, spent, held}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return {1, spent, held + micros}
"""
)

# KEYS: held, exp.  ARGV: key, hold_ms.  Returns 1 when the hold was extended to now + hold_ms, 0 when it is
# gone (settled, released or already swept): a hold is never brought back, or a lapsed one would be counted
# after the budget was handed to other runs.
RENEW = (
    _NOW
    + """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
if exp == false or tonumber(exp) <= now then return 0 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return 1
"""
)

# ARGV: key, actual, done_keep_ms, key_ttl_ms.
# Returns 2 when the hold was settled, 1 when the hold had already expired (the spend is recorded anyway: the
# provider charged it), 0 when this key was settled already (a repeated settle records nothing).
SETTLE = (
    _NOW
    + """
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return 0 end
local had = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), ARGV[1])
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
return 1 + had
"""
)

# KEYS: held, exp.  ARGV: key.  Returns 1 when a hold was released, 0 when there was none (already gone).
RELEASE = """
local had = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return had
"""

# KEYS: spent, held, exp.  Sweeps expired holds, then returns {spent, held, holds}.
USAGE = (
    _NOW
    + _SWEEP
    + """
local held = 0
local vals = redis.call('HVALS', KEYS[2])
for _, v in ipairs(vals) do held = held + tonumber(v) end
return {tonumber(redis.call('GET', KEYS[1]) or '0'), held, #vals}
"""
)
