"""Celery workers: delivery processing now; planning, shards and reporting hang off it."""
