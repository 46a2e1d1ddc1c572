"""Celery configuration, imported lazily by Celery the first time the worker app's conf is read."""

from config.broker import celery_config
from config.settings import get_settings

globals().update(celery_config(get_settings()))
