"""Read caches: answers kept in Redis (or memory) and served only while current.

:mod:`~chorus.caches.snapshot` is the snapshot format, :mod:`~chorus.caches.keys`
the Redis key space, :mod:`~chorus.caches.scripts` the version-guarded writes,
:mod:`~chorus.caches.snapshot_writer` the writer and :mod:`~chorus.caches.reader` the
API's reader (coalescing, circuit breaker). Every cached answer names the
version it was computed at and is served only while that version is the head.
"""
