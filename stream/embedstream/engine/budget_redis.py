"""The fleet's budget kept in Redis: `core/ledger.py`'s decisions as Lua scripts, each one
atomic and one round trip, on Redis' own clock (``TIME``), so members need no synchronised
clocks. A release is published on a channel, which wakes members waiting for a slot.

The keys share one hash tag, so the budget lives on one node of a cluster: leases (a sorted set
scored by expiry; a lease's name carries its lane and member), lane activity, the gate and the
buckets, members (scored by expiry), their roles and their lower-call caps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from embedstream.core.ledger import (
    LANES,
    SLOT_RECHECK_MS,
    AskTerms,
    Denied,
    Granted,
    MemberUse,
    Roster,
    Snapshot,
)
from embedstream.engine.redis_link import RedisLink, StoreFailed

# Shared by every script. KEYS: 1 leases, 2 active, 3 state (gate, buckets), 4 members,
# 5 roles, 6 caps, 7 a frozen clock (set only by tests that drive the rule to the
# millisecond). Numbers go out as strings: Redis would cut a Lua number to an integer.
_COMMON = """
local function now_ms()
  local frozen = redis.call('GET', KEYS[7])
  if frozen then return tonumber(frozen) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function lane_of(id) return tonumber(string.match(id, '^(%d+)|')) end
local function member_of(id) return string.match(id, '^%d+|([^|]*)|') end
local function num(x) return string.format('%.17g', x) end

local function drop_member(m)
  redis.call('ZREM', KEYS[4], m)
  redis.call('HDEL', KEYS[5], m)
  for lane = 0, 3 do redis.call('HDEL', KEYS[6], m .. '|' .. lane) end
end
local function expire(now)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do drop_member(m) end
end
local function counts()
  local c = {0, 0, 0, 0}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local l = lane_of(id) + 1
    c[l] = c[l] + 1
  end
  return c
end

-- core/ratelimit.TokenBucket, in the same arithmetic.
local function bucket(p)
  local v = redis.call('HMGET', KEYS[3], p .. 'rate', p .. 'burst', p .. 'level', p .. 'at')
  if not v[1] then return nil end
  return {rate = tonumber(v[1]), burst = tonumber(v[2]), level = tonumber(v[3]),
          at = v[4] and tonumber(v[4]) or nil}
end
local function put(p, b)
  local at = b.at and num(b.at) or ''
  redis.call('HSET', KEYS[3], p .. 'rate', num(b.rate), p .. 'burst', num(b.burst),
             p .. 'level', num(b.level), p .. 'at', at)
end
local function available(b, now)
  if not b.at then return b.burst end
  return math.min(b.burst, b.level + math.max(0, now - b.at) * b.rate)
end
local function b_wait(b, amount, now)
  local missing = amount - available(b, now)
  if missing > 1e-9 * math.max(1, amount) then return missing / b.rate end
  return 0
end
local function b_reserve(b, amount, now)
  b.level = available(b, now) - amount
  b.at = b.at and math.max(now, b.at) or now
  return math.max(0, -b.level / b.rate)
end
local function tune(p, per_minute, burst, now)
  local b = bucket(p)
  if per_minute <= 0 then
    if b then redis.call('HDEL', KEYS[3], p .. 'rate', p .. 'burst', p .. 'level', p .. 'at') end
    return nil
  end
  local size = burst > 0 and burst or per_minute
  local rate = per_minute / 60
  if not b then
    b = {rate = rate, burst = size, level = size, at = nil}
    put(p, b)
  elseif b.burst ~= size or b.rate ~= rate then
    local level = math.min(available(b, now), size)
    b.rate, b.burst, b.level = rate, size, level
    b.at = b.at and math.max(now, b.at) or now
    put(p, b)
  end
  return b
end
local function blocked(now_ms_)
  local gate = math.max(0, (tonumber(redis.call('HGET', KEYS[3], 'gate')) or 0) - now_ms_)
  local now = now_ms_ / 1000
  local pace = 0
  local r, t = bucket('r_'), bucket('t_')
  if r then pace = math.max(pace, b_wait(r, 1, now)) end
  if t then pace = math.max(pace, b_wait(t, 0, now)) end
  local pace_ms = math.ceil(pace * 1000)
  if gate >= pace_ms then return gate, 'gate' end
  return pace_ms, 'rates'
end
local function snapshot(now)
  local out = counts()
  for lane = 0, 3 do
    local seen = redis.call('HGET', KEYS[2], tostring(lane))
    out[#out + 1] = seen and (now - tonumber(seen)) or -1
  end
  out[#out + 1] = (blocked(now))
  out[#out + 1] = redis.call('ZCARD', KEYS[4])
  local lower = {0, 0, 0, 0}
  local caps = redis.call('HGETALL', KEYS[6])
  for i = 1, #caps, 2 do
    local lane = tonumber(string.match(caps[i], '|(%d+)$')) + 1
    local items = tonumber(caps[i + 1])
    if lower[lane] == 0 or items < lower[lane] then lower[lane] = items end
  end
  for lane = 1, 4 do out[#out + 1] = lower[lane] end
  return out
end
"""

# ARGV: member, lease, tokens, limit, lease_ttl_ms, rpm, tpm (0: none), recent_ms x4,
# slot_table x64, the slots' recheck, rpm_burst, tpm_burst (0: a minute's). Returns: granted
# (1/0), go_in_ms or wait_ms, reason, snapshot...
_ASK = (
    _COMMON
    + """
local now = now_ms()
expire(now)
local lease = ARGV[2]
local lane = lane_of(lease)
redis.call('HSET', KEYS[2], tostring(lane), now)
tune('r_', tonumber(ARGV[6]), tonumber(ARGV[77]), now / 1000)
tune('t_', tonumber(ARGV[7]), tonumber(ARGV[78]), now / 1000)
local held, reason = blocked(now)
if held > 0 then
  local out = {0, held, reason}
  for _, v in ipairs(snapshot(now)) do out[#out + 1] = v end
  return out
end
local c = counts()
local mask = 0
for l = 0, 3 do
  local seen = redis.call('HGET', KEYS[2], tostring(l))
  if seen and now - tonumber(seen) <= tonumber(ARGV[8 + l]) then mask = mask + 2 ^ l end
end
local cap = tonumber(ARGV[12 + lane * 16 + mask])
local total = c[1] + c[2] + c[3] + c[4]
if total >= tonumber(ARGV[4]) or c[lane + 1] >= cap then
  local out = {0, tonumber(ARGV[76]), 'slots'}
  for _, v in ipairs(snapshot(now)) do out[#out + 1] = v end
  return out
end
local secs = now / 1000
local r, t = bucket('r_'), bucket('t_')
if mask % (2 ^ lane) > 0 then
  -- an upper lane is active: wait, reserving nothing, until the call fits without debt
  local room = 0
  if r then room = math.max(room, b_wait(r, 1, secs)) end
  if t then room = math.max(room, b_wait(t, math.min(tonumber(ARGV[3]), t.burst), secs)) end
  local room_ms = math.ceil(room * 1000)
  if room_ms > 0 then
    local out = {0, room_ms, 'rates'}
    for _, v in ipairs(snapshot(now)) do out[#out + 1] = v end
    return out
  end
end
local delay = 0
if r then delay = math.max(delay, b_reserve(r, 1, secs)); put('r_', r) end
if t then delay = math.max(delay, b_reserve(t, tonumber(ARGV[3]), secs)); put('t_', t) end
local go_in = math.ceil(delay * 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]) + go_in, lease)
local out = {1, go_in, ''}
for _, v in ipairs(snapshot(now)) do out[#out + 1] = v end
return out
"""
)

# ARGV: lease, channel. Returns the snapshot.
_RELEASE = (
    _COMMON
    + """
local now = now_ms()
redis.call('ZREM', KEYS[1], ARGV[1])
expire(now)
redis.call('PUBLISH', ARGV[2], ARGV[1])
return snapshot(now)
"""
)

# ARGV: for_ms, channel. Every member hears of the gate at once ("gate|<ms>").
_BLOCK = (
    _COMMON
    + """
local now = now_ms()
local gate = tonumber(redis.call('HGET', KEYS[3], 'gate')) or 0
redis.call('HSET', KEYS[3], 'gate', math.max(gate, now + tonumber(ARGV[1])))
redis.call('PUBLISH', ARGV[2], 'gate|' .. ARGV[1])
return 1
"""
)

# ARGV: member, role, ttl_ms, n leases, leases..., n active, lanes..., n caps, (lane, items)...
# Returns the snapshot's length, the snapshot, then (member, role, in flight x4) per member.
_HEARTBEAT = (
    _COMMON
    + """
local now = now_ms()
local member, ttl = ARGV[1], tonumber(ARGV[3])
redis.call('ZADD', KEYS[4], now + ttl, member)
redis.call('HSET', KEYS[5], member, ARGV[2])
local i = 4
local n = tonumber(ARGV[i])
local mine = {}
for k = 1, n do mine[ARGV[i + k]] = true end
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if member_of(id) == member and not mine[id] then redis.call('ZREM', KEYS[1], id) end
end
for k = 1, n do
  local id = ARGV[i + k]
  local until_ = math.max(tonumber(redis.call('ZSCORE', KEYS[1], id)) or 0, now + ttl)
  redis.call('ZADD', KEYS[1], until_, id)
end
i = i + n + 1
n = tonumber(ARGV[i])
for k = 1, n do
  local lane = ARGV[i + k]
  local seen = tonumber(redis.call('HGET', KEYS[2], lane)) or 0
  redis.call('HSET', KEYS[2], lane, math.max(seen, now))
end
i = i + n + 1
n = tonumber(ARGV[i])
for lane = 0, 3 do redis.call('HDEL', KEYS[6], member .. '|' .. lane) end
for k = 1, n do
  redis.call('HSET', KEYS[6], member .. '|' .. ARGV[i + 2 * k - 1], ARGV[i + 2 * k])
end
expire(now)
local snap = snapshot(now)
local out = {#snap}
for _, v in ipairs(snap) do out[#out + 1] = v end
local roles = {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do roles[#roles + 1] = m end
table.sort(roles)
local per = {}
for _, m in ipairs(roles) do per[m] = {0, 0, 0, 0} end
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local m = member_of(id)
  if per[m] then
    local l = lane_of(id) + 1
    per[m][l] = per[m][l] + 1
  end
end
for _, m in ipairs(roles) do
  out[#out + 1] = m
  out[#out + 1] = redis.call('HGET', KEYS[5], m) or ''
  for l = 1, 4 do out[#out + 1] = per[m][l] end
end
return out
"""
)

# ARGV: member.
_LEAVE = (
    _COMMON
    + """
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if member_of(id) == ARGV[1] then redis.call('ZREM', KEYS[1], id) end
end
drop_member(ARGV[1])
return 1
"""
)

_SNAPSHOT_FIELDS = 4 + 4 + 1 + 1 + 4


def _snapshot(values: Sequence[Any]) -> Snapshot:
    v = [int(x) for x in values]
    return Snapshot(
        in_flight=tuple(v[0:LANES]),
        seen_ago_ms=tuple(v[LANES : 2 * LANES]),
        blocked_ms=v[2 * LANES],
        members=v[2 * LANES + 1],
        lower_call_items=tuple(v[2 * LANES + 2 : 3 * LANES + 2]),
    )


class RedisBudgetStore:
    """`core/ledger.FleetLedger` in Redis, for one budget (``namespace``: the provider it
    is the budget of)."""

    def __init__(self, link: RedisLink, namespace: str) -> None:
        self._link = link
        tag = f"embedstream:budget:{{{namespace}}}"
        parts = ("leases", "active", "state", "members", "roles", "caps", "frozen_clock")
        self._keys = [f"{tag}:{part}" for part in parts]
        self.channel = f"{tag}:released"
        self._ask = link.script(_ASK)
        self._release = link.script(_RELEASE)
        self._block = link.script(_BLOCK)
        self._heartbeat = link.script(_HEARTBEAT)
        self._leave = link.script(_LEAVE)

    async def ask(self, member: str, lease: str, tokens: int, terms: AskTerms) -> Granted | Denied:
        args: list[str | int | float] = [
            member, lease, tokens, terms.limit, terms.lease_ttl_ms,
            repr(float(terms.rpm or 0)), repr(float(terms.tpm or 0)),
            *terms.recent_ms, *terms.slot_table, SLOT_RECHECK_MS,
            repr(float(terms.rpm_burst or 0)), repr(float(terms.tpm_burst or 0)),
        ]  # fmt: skip
        reply = await self._ask(self._keys, args)
        snapshot = _snapshot(reply[3:])
        if int(reply[0]) == 1:
            return Granted(int(reply[1]), snapshot)
        reason = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
        return Denied(int(reply[1]), reason, snapshot)

    async def release(self, lease: str) -> Snapshot:
        return _snapshot(await self._release(self._keys, [lease, self.channel]))

    async def block(self, for_ms: int) -> None:
        await self._block(self._keys, [for_ms, self.channel])

    async def heartbeat(
        self,
        member: str,
        role: str,
        ttl_ms: int,
        leases: Collection[str],
        active: Collection[int],
        caps: Mapping[int, int],
    ) -> Roster:
        args: list[str | int | float] = [member, role, ttl_ms, len(leases), *leases]
        args += [len(active), *active, len(caps)]
        for lane, items in caps.items():
            args += [lane, items]
        reply = await self._heartbeat(self._keys, args)
        size = int(reply[0])
        snapshot = _snapshot(reply[1 : 1 + size])
        rest = reply[1 + size :]
        uses = []
        for at in range(0, len(rest), 2 + LANES):
            name, role_of = (_text(x) for x in rest[at : at + 2])
            uses.append(
                MemberUse(name, role_of, tuple(int(x) for x in rest[at + 2 : at + 2 + LANES]))
            )
        return Roster(snapshot, tuple(uses))

    async def leave(self, member: str) -> None:
        await self._leave(self._keys, [member])

    async def releases(self) -> AsyncIterator[str]:
        """The name of each lease released anywhere in the fleet, and ``gate|<ms>`` for each
        gate closed."""
        async for message in self._link.messages(self.channel):
            yield message.decode()

    async def close(self) -> None:
        await self._link.close()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = ["RedisBudgetStore", "StoreFailed"]
