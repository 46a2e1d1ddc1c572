"""Celery configuration, imported lazily by Celery the first time the worker app's conf is read."""

from store.queue import celery_config
from store.settings import get_settings

globals().update(celery_config(get_settings()))
