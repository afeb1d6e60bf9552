"""Storage: SQLAlchemy tables, reads, the unit of work and migrations.

:class:`~chorus.db.store.PlaylistStore` runs a domain command in one
transaction; :mod:`chorus.db.repository` reads pages and history;
:mod:`chorus.db.migrate` brings a database to the current schema.
"""
