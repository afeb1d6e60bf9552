"""The rules of a collaborative playlist, in pure Python.

Nothing here performs I/O or imports a third-party package (an import-linter
contract and ``tests/unit/test_architecture.py`` check it). Storage reaches the
rules through the :class:`chorus.domain.ports.PlaylistView` port.
"""
