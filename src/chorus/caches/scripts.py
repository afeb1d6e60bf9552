"""The Lua scripts that write snapshots and head versions, each idempotent by version.

Replaying an old or a duplicate event never moves a snapshot or a head
backwards: every write compares versions inside Redis, atomically. The head
(:func:`~chorus.caches.keys.head_key`) is the newest version known to be
committed; a snapshot is served only while its version *is* the head.
A write that learned a head from an observation (not a commit) is checked
against the generation (:mod:`chorus.caches.generation`): Redis may have
forgotten a higher head since.
"""

from __future__ import annotations

from chorus.caches.snapshot import SNAPSHOT_FORMAT

STORED_VERSION = (
    """
local function stored_version(key)
  local doc = redis.call('GET', key)
  if not doc then return -1 end
  return tonumber(string.match(doc, '^{"v":"""
    + str(SNAPSHOT_FORMAT)
    + ""","version":(%d+)')) or -1
end
local function raise_head(key, version)
  local head = tonumber(redis.call('GET', key)) or -1
  if version > head then redis.call('SET', key, version) end
  return head
end
"""
)

EVICTED = """
local function evicted_keys()
  return tonumber(string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)'))
end
"""

# KEYS: generation. ARGV: a fresh token, the pattern of playlist keys.
# Returns {generation, evicted_keys}. The generation is kept while the server
# answering is the one that began it (same run_id). Written by another server
# (restarted from a file, a promoted replica): the data set may have gone back,
# so every head and snapshot goes with it, in the same atomic step, and no
# command ever reads a head of it. Missing (FLUSHALL, evicted): the keys left
# went nowhere backwards; a new generation ends the answers stamped with the old.
ENSURE = (
    EVICTED
    + """
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local generation = redis.call('GET', KEYS[1])
if generation and string.sub(generation, 1, #run_id + 1) == run_id .. ':' then
  return {generation, evicted_keys()}
end
if generation then
  local cursor = '0'
  repeat
    local found = redis.call('SCAN', cursor, 'MATCH', ARGV[2], 'COUNT', 1000)
    cursor = found[1]
    for _, key in ipairs(found[2]) do
      if string.sub(key, -5) == ':head' or string.sub(key, -9) == ':snapshot' then
        redis.call('UNLINK', key)
      end
    end
  until cursor == '0'
end
generation = run_id .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], generation)
return {generation, evicted_keys()}
"""
)

# The head a write learned from an observation may be raised (or, when no key
# was evicted since its ticket, created); -1: refused, the caller's ticket is stale.
LEARN_HEAD = (
    EVICTED
    + """
local function learn_head(key, version, evicted)
  local head = tonumber(redis.call('GET', key))
  if head then
    if version > head then redis.call('SET', key, version) end
    return head
  end
  if evicted ~= evicted_keys() then return nil end
  redis.call('SET', key, version)
  return -1
end
"""
)

# KEYS: snapshot, head, generation. ARGV: version, json, generation, evicted.
# 1 when written, 0 when not, -1 when refused (the generation moved, or the
# head is missing and keys were evicted since the ticket).
# A version below the head can never be served (reads need version == head),
# and refusing it keeps a late write from resurrecting a removed snapshot.
PUT = (
    STORED_VERSION
    + LEARN_HEAD
    + """
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return -1 end
local version = tonumber(ARGV[1])
local head = learn_head(KEYS[2], version, tonumber(ARGV[4]))
if not head then return -1 end
if version < head or version <= stored_version(KEYS[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""
)

# KEYS: snapshot, head, generation. ARGV: version, generation, evicted.
# 1 when a snapshot was deleted, 0 when not, -1 when nothing was deleted and
# the head raise was refused. A newer snapshot (public again since) stays;
# deleting an older one is safe in any generation.
REMOVE = (
    STORED_VERSION
    + LEARN_HEAD
    + """
local version = tonumber(ARGV[1])
local removed = 0
local stored = stored_version(KEYS[1])
if (stored >= 0 or redis.call('EXISTS', KEYS[1]) == 1) and stored <= version then
  redis.call('DEL', KEYS[1])
  removed = 1
end
if redis.call('GET', KEYS[3]) ~= ARGV[2] or not learn_head(KEYS[2], version, tonumber(ARGV[3])) then
  if removed == 0 then return -1 end
end
return removed
"""
)

# KEYS: generation, heads. ARGV: generation, evicted, a version per head.
# Raises heads to versions a read saw committed; 1, or -1 when any was refused.
LEARN = (
    LEARN_HEAD
    + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local refused = 0
for i = 2, #KEYS do
  if not learn_head(KEYS[i], tonumber(ARGV[i + 1]), tonumber(ARGV[2])) then
    refused = 1
  end
end
if refused == 1 then return -1 end
return 1
"""
)

# KEYS: head. ARGV: version. A commit's raise, unguarded: a committed version
# is a floor in every generation, and refusing it could let a read that
# began before the commit create the head below it.
BUMP = (
    STORED_VERSION
    + """
raise_head(KEYS[1], tonumber(ARGV[1]))
return 0
"""
)

# KEYS: snapshots. The stored versions (-1: none).
VERSIONS = (
    STORED_VERSION
    + """
local out = {}
for i, key in ipairs(KEYS) do out[i] = stored_version(key) end
return out
"""
)

# --- Redis Cluster: one generation per slot (chorus.caches.cluster_store) ----------

OWN_GENERATION = """
local function own_generation(key)
  local generation = redis.call('GET', key)
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if generation and string.sub(generation, 1, #run_id + 1) == run_id .. ':' then
    return generation
  end
  return nil
end
"""


def on_cluster(script: str, generation_key: int) -> str:
    """``script`` refusing (-1) unless its slot's generation (``KEYS[generation_key]``)
    began on the node answering: a failover or a restart left it behind, and
    only :data:`ENSURE_SLOT` may take it up again. A migrated slot keeps its
    data, but its generation names the node it left, so it is treated the same."""
    return (
        OWN_GENERATION
        + f"if not own_generation(KEYS[{generation_key}]) then return -1 end\n"
        + script
    )


# KEYS: the slot's generation. ARGV: a fresh token, the slot. ENSURE for one
# slot of a cluster: {generation, evicted_keys} of the node answering. Not
# begun on this node (failover, restart, a migrated slot): the slot's heads
# and snapshots go, and a new generation begins, atomically.
ENSURE_SLOT = (
    EVICTED
    + OWN_GENERATION
    + """
local generation = own_generation(KEYS[1])
if generation then return {generation, evicted_keys()} end
local slot = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local count = redis.call('CLUSTER', 'COUNTKEYSINSLOT', slot)
  if count > 0 then
    for _, key in ipairs(redis.call('CLUSTER', 'GETKEYSINSLOT', slot, count)) do
      if string.sub(key, -5) == ':head' or string.sub(key, -9) == ':snapshot' then
        redis.call('UNLINK', key)
      end
    end
  end
end
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
generation = run_id .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], generation)
return {generation, evicted_keys()}
"""
)

# KEYS: the slot's generation, heads of that slot. The hot read of a cluster:
# {generation or false when not begun on this node, head or false per head}.
HEADS = (
    OWN_GENERATION
    + """
local out = {own_generation(KEYS[1]) or false}
for i = 2, #KEYS do out[i] = redis.call('GET', KEYS[i]) end
return out
"""
)

# KEYS: the slot's generation, head, snapshot. A snapshot read on a cluster:
# {head, snapshot, 1}, or {false, false, 0} when the slot's generation was not
# begun on this node (a promoted replica's copy may be older: never served).
READ = (
    OWN_GENERATION
    + """
if not own_generation(KEYS[1]) then return {false, false, 0} end
return {redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3]), 1}
"""
)
