"""Thin functions between the GraphQL types and the domain.

Each takes arguments :mod:`chorus.graphql.schema.common.arguments` has already checked and
decoded, runs one domain command or one read, and returns domain values or
small result records; none refuses an argument. SQL reads go through
:mod:`chorus.db.pages`; :mod:`chorus.resolvers.snapshots` decides when a
Redis snapshot answers instead. Nothing here knows strawberry's types.
"""
