"""The scripts that change shared limits. Time is Redis's own (TIME), in milliseconds, so every
instance sees one clock. A bucket is a GCRA key holding its theoretical arrival time (TAT): the
bucket holds `burst - (max(TAT, now) - now) / interval` tokens, where `interval` is the time one
token takes to refill; a missing key is a full bucket. A charge moves TAT forward, a refund back
(never before now); a charge after the fact may push it past `now + burst * interval`: a debt
the refill pays back. A key expires when its bucket would be full again. Concurrency is a sorted
set of lease ids scored by their expiry; expired leases are dropped before counting.
"""

from __future__ import annotations

from typing import Final

_PRELUDE = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local function tat_of(key)
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then return now end
  return tat
end
local function store(key, tat)
  if tat > now then
    redis.call('SET', key, string.format('%.17g', tat), 'PX', math.ceil(tat - now) + 1000)
  else
    redis.call('DEL', key)
  end
end
"""

# KEYS: requests TAT, tokens TAT, leases.
# ARGV: requests interval ms (0: no limit), requests burst, tokens interval ms (0: no limit),
#       tokens burst, tokens to reserve, max concurrent (0: no limit), lease id, lease ttl ms.
# Answer: {code, wait_us, requests_remaining, requests_reset_us, tokens_remaining,
#          tokens_reset_us}; code 0 admitted (charged, lease taken), 1 concurrency full,
#          2 requests short, 3 tokens short, 4 more tokens than the burst (wait_us -1).
RESERVE: Final = (
    _PRELUDE
    + """
local rq_i, rq_b = tonumber(ARGV[1]), tonumber(ARGV[2])
local tk_i, tk_b = tonumber(ARGV[3]), tonumber(ARGV[4])
local n, cap = tonumber(ARGV[5]), tonumber(ARGV[6])
local rq_tat, tk_tat = now, now
local rq_wait, tk_wait = 0, 0
if rq_i > 0 then
  rq_tat = tat_of(KEYS[1])
  rq_wait = rq_tat + rq_i - rq_b * rq_i - now
end
local too_large = tk_i > 0 and n > tk_b
if tk_i > 0 then
  tk_tat = tat_of(KEYS[2])
  tk_wait = tk_tat + n * tk_i - tk_b * tk_i - now
end
local full = false
if cap > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  full = redis.call('ZCARD', KEYS[3]) >= cap
end
local code, wait = 0, 0
if full then code = 1
elseif too_large then code, wait = 4, -1
elseif tk_wait > 1e-6 then code, wait = 3, math.max(tk_wait, rq_wait)
elseif rq_wait > 1e-6 then code, wait = 2, rq_wait
end
if code == 0 then
  if rq_i > 0 then rq_tat = rq_tat + rq_i; store(KEYS[1], rq_tat) end
  if tk_i > 0 then tk_tat = tk_tat + n * tk_i; store(KEYS[2], tk_tat) end
  if cap > 0 then
    local ttl = tonumber(ARGV[8])
    redis.call('ZADD', KEYS[3], now + ttl, ARGV[7])
    redis.call('PEXPIRE', KEYS[3], 2 * ttl)
  end
end
local function remaining(tat, i, b)
  if i <= 0 then return 0 end
  local level = b - (tat - now) / i
  if level <= 0 then return 0 end
  return math.floor(level + 1e-6)
end
local function us(ms)
  if ms < 0 then return -1 end
  return math.ceil(ms * 1000)
end
return {code, us(wait), remaining(rq_tat, rq_i, rq_b), us(rq_tat - now),
        remaining(tk_tat, tk_i, tk_b), us(tk_tat - now)}
"""
)

# After the request: settle the tokens (positive: charge the excess, a debt allowed; negative:
# refund), optionally give back the request itself, and drop the lease.
# KEYS: requests TAT, tokens TAT, leases.
# ARGV: requests interval ms to give back (0: none), tokens interval ms (0: no tokens limit),
#       tokens delta, lease id ('' none).
SETTLE: Final = (
    _PRELUDE
    + """
local rq_i, tk_i, delta = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if rq_i > 0 then
  store(KEYS[1], tonumber(redis.call('GET', KEYS[1]) or '0') - rq_i)
end
if tk_i > 0 and delta ~= 0 then
  store(KEYS[2], tat_of(KEYS[2]) + delta * tk_i)
end
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[3], ARGV[4]) end
return 1
"""
)

# Leases of requests still running: pushed to now + ttl (added again if they had expired: the
# request does run); expired ones dropped. KEYS: leases. ARGV: ttl ms, lease ids...
REFRESH: Final = (
    _PRELUDE
    + """
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], now + ttl, ARGV[i]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return redis.call('ZCARD', KEYS[1])
"""
)

# One instance alive for ttl more ms; answers how many are (the fallback's divisor).
# KEYS: instances. ARGV: instance id, ttl ms (0: the instance leaves).
HEARTBEAT: Final = (
    _PRELUDE
    + """
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""
)
