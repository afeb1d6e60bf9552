"""Thin functions between the GraphQL types and the domain.

Each takes plain arguments (ids already decoded by :mod:`chorus.graphql`),
runs one domain command or one read, and returns domain values or small
result records. Nothing here knows strawberry's types.
"""
