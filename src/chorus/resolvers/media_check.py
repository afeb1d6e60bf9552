"""The catalog check of the media a mutation adds or likes: one catalog call per mutation.

Malformed ids are left to the domain, which refuses them as ``INVALID_INPUT``
after its access checks; some (a lone surrogate, NUL) no catalog could even
look up. An add of more media than ``limits.max_media_per_add`` is refused by
the domain too, and the catalog is not asked for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chorus.catalog.protocol import CatalogUnavailable
from chorus.domain.errors import InvalidInput, MediaNotFound
from chorus.domain.limits import Limits
from chorus.domain.validation import check_id
from chorus.resolvers.context import RequestContext
from chorus.resolvers.request_errors import CATALOG_UNAVAILABLE, ServiceUnavailable

Field = Callable[[int], tuple[str, ...]]
"""The field of an add's ``j``-th media id, for its error."""


def well_formed_media(media_id: str, limits: Limits) -> bool:
    """Whether the catalog may be asked for ``media_id`` (the domain refuses the others)."""
    try:
        check_id(media_id, ("mediaIds",), limits, "a media id")
    except InvalidInput:
        return False
    return True


async def unknown_media(
    ctx: RequestContext, adds: Sequence[tuple[int, Sequence[str], Field]]
) -> dict[int, MediaNotFound]:
    """The adds (by their index) naming a media the catalog does not know: the first such each.

    Args:
        adds: ``(index, media ids, field of the j-th id)`` of each add; one
            for an edit or a like, a batch's adds for a batch.

    Raises:
        ServiceUnavailable: the catalog does not answer.
    """
    limits = ctx.services.limits
    asked = [(i, media, at) for i, media, at in adds if len(media) <= limits.max_media_per_add]
    media = (m for _, ids, _ in asked for m in ids if well_formed_media(m, limits))
    wanted = list(dict.fromkeys(media))
    if not wanted:
        return {}
    try:
        known = await ctx.services.catalog.get_many(wanted)
    except CatalogUnavailable:
        raise ServiceUnavailable(CATALOG_UNAVAILABLE) from None
    refused: dict[int, MediaNotFound] = {}
    wanted_set = set(wanted)
    for i, ids, at in asked:
        for j, media_id in enumerate(ids):
            if media_id in wanted_set and media_id not in known:
                refused[i] = MediaNotFound(f"media {media_id!r} is not in the catalog", field=at(j))
                break
    return refused
