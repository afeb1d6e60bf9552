"""Which fields a cached answer may hold: those whose value a playlist version names.

The response cache (docs/caching.md) keeps an answer by the versions of
the playlists it read. That is only right if every field of the answer is
fixed by those versions (or by who asks, which the audience covers, or by
the catalog, which has its own freshness). The resolvers report what they
read (:mod:`chorus.resolvers.reads`); this module is the other half, an
allow-list: an operation selecting any field not in :data:`VERSIONED_FIELDS`
is never cached, so a field added later (a follower count, a feed) is
uncached until someone decides, in this file, that a version covers it.
``tests/unit/test_versioned_fields.py`` makes that decision explicit for
every field of the schema.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import ClassVar

from graphql import (
    DocumentNode,
    FieldNode,
    GraphQLSchema,
    TypeInfo,
    TypeInfoVisitor,
    Visitor,
    visit,
)
from strawberry.extensions import SchemaExtension

from chorus.caches.memo_keys import VersionedFieldsKey, versioned_fields_key
from chorus.resolvers.context import RequestContext

VERSIONED_FIELDS = frozenset(
    {
        "Query.playlist",
        "Query.node",
        "Query.viewer",  # the viewer's own: the answer's audience is that viewer
        "Viewer.user",
        "User.id",
        "Node.id",
        *(
            f"Playlist.{name}"
            for name in [
                "id",
                "title",
                "description",
                "visibility",
                "collaborative",
                "version",
                "entryCount",
                "createdAt",
                "updatedAt",
                "owner",
                "viewerRole",
                "entries",
                # The sum over the version's entries (resolvers.playlist_lists names the
                # version it read) and catalog durations (read_media: freshness).
                "totalDurationMs",
            ]
        ),
        *(f"PlaylistEntryConnection.{n}" for n in ("edges", "pageInfo", "totalCount", "version")),
        "PlaylistEntryEdge.cursor",
        "PlaylistEntryEdge.node",
        *(
            f"PlaylistEntry.{n}"
            for n in ("id", "positionKey", "mediaId", "addedAt", "addedBy", "media")
        ),
        *(f"PageInfo.{n}" for n in ("hasNextPage", "hasPreviousPage", "startCursor", "endCursor")),
        # Catalog metadata: kept for CHORUS_MEDIA_FRESHNESS_S, not by version.
        *(f"Media.{n}" for n in ("id", "title", "artists", "album", "durationMs", "available")),
    }
)
"""``Type.field`` names a cached answer may select (introspection is always fixed)."""

_CACHE_SIZE = 1024
"""Documents whose verdict is remembered (clients send the same few)."""


def unversioned_field(schema: GraphQLSchema, document: DocumentNode) -> str | None:
    """The first ``Type.field`` of ``document`` not in :data:`VERSIONED_FIELDS`, or ``None``.

    Every field written in the document counts, fragments included (each
    visited once, so linear time); ``__typename`` and introspection are fixed.
    """
    info = TypeInfo(schema)
    fields = _FirstUnversioned(info)
    visit(document, TypeInfoVisitor(info, fields))
    return fields.found


class _FirstUnversioned(Visitor):
    """Stops at the first field not in :data:`VERSIONED_FIELDS`, kept in ``found``.

    A class of its own, not one made per call: a class is a cycle of some
    thirty objects (and graphql-core's ``Visitor`` checks its methods as each
    is made), left to the collector after every new document.
    """

    def __init__(self, info: TypeInfo) -> None:
        super().__init__()
        self.info = info
        self.found: str | None = None

    def enter_field(self, node: FieldNode, *_: object) -> object:
        parent = self.info.get_parent_type()
        name = node.name.value
        if parent is None or name.startswith("__") or parent.name.startswith("__"):
            return None
        qualified = f"{parent.name}.{name}"
        if qualified not in VERSIONED_FIELDS:
            self.found = qualified
            return Visitor.BREAK
        return None


class VersionedFieldsOnly(SchemaExtension):
    """Marks an answer uncacheable when it selects a field no version names."""

    _verdicts: ClassVar[OrderedDict[VersionedFieldsKey, str | None]] = OrderedDict()
    """Per schema and document text (:func:`chorus.caches.memo_keys.versioned_fields_key`)."""

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context
        request = context.context
        document = context.graphql_document
        if isinstance(request, RequestContext) and document is not None:
            self.refuse_unversioned(context.schema._schema, context.query, document, request)
        yield

    @classmethod
    def refuse_unversioned(
        cls,
        schema: GraphQLSchema,
        query: str | None,
        document: DocumentNode,
        request: RequestContext,
    ) -> None:
        """Mark ``request``'s answer uncacheable if ``document`` (the text ``query``) selects
        a field no version names; the verdict is kept per schema and text."""
        # Its id, not the schema: the memo outlives schemas built in tests and
        # must not keep them; builds of this code give every document one verdict.
        key = versioned_fields_key(id(schema), query or "")
        verdicts = cls._verdicts
        if key in verdicts:
            verdicts.move_to_end(key)
            field = verdicts[key]
        else:
            field = unversioned_field(schema, document)
            verdicts[key] = field
            if len(verdicts) > _CACHE_SIZE:
                verdicts.popitem(last=False)
        if field is not None:
            request.reads.record.refuse(f"{field} is not named by a playlist version")


__all__ = ["VERSIONED_FIELDS", "VersionedFieldsOnly", "unversioned_field"]
