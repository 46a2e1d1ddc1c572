"""Celery configuration, imported lazily by Celery the first time the worker app's conf is read."""

from relay.queue import celery_config
from relay.settings import get_settings

globals().update(celery_config(get_settings()))
