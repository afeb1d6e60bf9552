"""Staying up while servers come and go: backoff, circuit breaker, stopping tasks for certain."""
