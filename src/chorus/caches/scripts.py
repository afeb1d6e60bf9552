"""The Lua scripts that write snapshots and head versions, each idempotent by version.

Replaying an old or a duplicate event never moves a snapshot or a head
backwards: every write compares versions inside Redis, atomically. The head
(:func:`~chorus.caches.keys.head_key`) is the newest version known to be
committed; a snapshot is served only while its version *is* the head.
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

# KEYS: snapshot, head. ARGV: version, json. 1 when written.
# A version below the head can never be served (reads need version == head),
# and refusing it keeps a late write from resurrecting a removed snapshot.
PUT = (
    STORED_VERSION
    + """
local version = tonumber(ARGV[1])
local head = raise_head(KEYS[2], version)
if version < head or version <= stored_version(KEYS[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""
)

# KEYS: snapshot, head. ARGV: version. 1 when a snapshot was deleted.
# A newer snapshot (public again since) stays.
REMOVE = (
    STORED_VERSION
    + """
local version = tonumber(ARGV[1])
raise_head(KEYS[2], version)
local stored = stored_version(KEYS[1])
if stored < 0 and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if stored > version then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""
)

# KEYS: head. ARGV: version.
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
