"""The budgets' Lua scripts (``StoreBudget``). Amounts are whole numbers: tokens and
nano-dollars. A counter's HASH has t, u (used), rt, ru (reserved by calls under way) and w
(warned this window); its ZSET of holds scores each ``hold|tokens|nano`` member by when it
expires, on the store's clock, unless its holder renews it."""

from __future__ import annotations

# One step of the budgets, one round trip: settle the calls that ended (each counter they
# were held on), then hold a new call's worst case on each of its counters, if every one of
# them has room (used + reserved + wanted <= limit), else on none.
#
# KEYS: per settled counter: counter, holds; then per counter to reserve on: counter, holds
# ARGV: 1 settled counters, 2 counters to reserve on, 3 lease ms, 4 the new hold's member,
#       5 its tokens, 6 its nano-dollars; then per settled counter: member, tokens, nano,
#       ttl s, warn at tokens, warn at nano (-1: no warning); then per counter to reserve
#       on: limit tokens, limit nano (-1: no limit), ttl s
# Returns {1} (held, or nothing to hold) or {0, counter, unit (0 tokens, 1 nano), used,
# reserved} (refused), then settled counter, tokens, nano for each that passed its warning
# share for the first time in its window.
STEP = """
local function add(key, field, n)
  if n ~= 0 then redis.call('HINCRBY', key, field, string.format('%d', n)) end
end
local function held(member)
  local _, _, t, u = string.find(member, '|(%d+)|(%d+)$')
  return tonumber(t), tonumber(u)
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ns, nr = tonumber(ARGV[1]), tonumber(ARGV[2])
local warned = {}
local a = 7
for i = 1, ns do
  local c, h, m = KEYS[2 * i - 1], KEYS[2 * i], ARGV[a]
  if redis.call('ZREM', h, m) == 1 then
    local t, u = held(m)
    add(c, 'rt', -t)
    add(c, 'ru', -u)
  end
  local t = redis.call('HINCRBY', c, 't', ARGV[a + 1])
  local u = redis.call('HINCRBY', c, 'u', ARGV[a + 2])
  if t == tonumber(ARGV[a + 1]) then  -- the counter was made again (it had expired)
    redis.call('EXPIRE', c, ARGV[a + 3])
  end
  local wt, wu = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  if ((wt >= 0 and t >= wt) or (wu >= 0 and u >= wu))
      and redis.call('HSETNX', c, 'w', 1) == 1 then
    table.insert(warned, i)
    table.insert(warned, t)
    table.insert(warned, u)
  end
  a = a + 6
end
local out = {1}
local base = 2 * ns
local wt, wu = tonumber(ARGV[5]), tonumber(ARGV[6])
for j = 1, nr do
  local c, h = KEYS[base + 2 * j - 1], KEYS[base + 2 * j]
  local gone = redis.call('ZRANGEBYSCORE', h, '-inf', string.format('%d', now))
  if #gone > 0 then
    for _, m in ipairs(gone) do
      local t, u = held(m)
      add(c, 'rt', -t)
      add(c, 'ru', -u)
    end
    redis.call('ZREMRANGEBYSCORE', h, '-inf', string.format('%d', now))
  end
end
for j = 1, nr do
  local b = a + 3 * (j - 1)
  local lt, lu = tonumber(ARGV[b]), tonumber(ARGV[b + 1])
  local v = redis.call('HMGET', KEYS[base + 2 * j - 1], 't', 'u', 'rt', 'ru')
  local t, u = tonumber(v[1] or 0), tonumber(v[2] or 0)
  local rt, ru = tonumber(v[3] or 0), tonumber(v[4] or 0)
  if lt >= 0 and t + rt + wt > lt then
    out = {0, j, 0, t, rt}
    break
  end
  if lu >= 0 and u + ru + wu > lu then
    out = {0, j, 1, u, ru}
    break
  end
end
if out[1] == 1 then
  local expires = string.format('%d', now + tonumber(ARGV[3]))
  for j = 1, nr do
    local c, h = KEYS[base + 2 * j - 1], KEYS[base + 2 * j]
    redis.call('ZADD', h, expires, ARGV[4])
    add(c, 'ru', wu)
    if redis.call('HINCRBY', c, 'rt', ARGV[5]) == wt then
      -- No other hold on the counter: its keys may be new, and get their time to live.
      local ttl = ARGV[a + 3 * (j - 1) + 2]
      redis.call('EXPIRE', c, ttl)
      redis.call('EXPIRE', h, ttl)
    end
  end
end
for _, x in ipairs(warned) do
  table.insert(out, x)
end
return out
"""

# Renew the holds of calls still under way (their process is alive).
# KEYS: holds   ARGV: lease ms, then the member held on each key
RENEW = """
local clock = redis.call('TIME')
local expires = string.format('%d', tonumber(clock[1]) * 1000
  + math.floor(tonumber(clock[2]) / 1000) + tonumber(ARGV[1]))
for i, h in ipairs(KEYS) do
  redis.call('ZADD', h, 'XX', expires, ARGV[i + 1])
end
return #KEYS
"""
