"""A 405's ``Allow`` names the route's methods in one order, whatever the string hashes:
a set iterates in its strings' hash order, which each process's hash seed sets."""

from __future__ import annotations

from starlette.routing import Route

from chorus.app import _Methods, _routes

EVERY = ["PUT", "POST", "GET", "PATCH", "HEAD", "DELETE", "OPTIONS"]


def test_methods_iterate_sorted() -> None:
    # Seven methods: a hash order that happens to be sorted is 1 in 5,040.
    assert list(_Methods(EVERY)) == sorted(EVERY)
    assert ", ".join(_Methods(EVERY)) == "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
    assert "GET" in _Methods(EVERY)
    assert "TRACE" not in _Methods(EVERY)


def test_every_route_s_allow_is_in_that_order() -> None:
    allows = [
        ", ".join(r.methods)
        for r in _routes(lambda *a: None)
        if isinstance(r, Route) and r.methods is not None
    ]
    assert allows == ["GET, POST", "GET, HEAD", "GET, HEAD", "GET, HEAD"]
    assert all(
        isinstance(r.methods, _Methods) for r in _routes(lambda *a: None) if isinstance(r, Route)
    )
