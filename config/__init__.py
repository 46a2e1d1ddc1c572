"""The configuration every process reads: typed settings (``config.settings``), structured logs
(``config.logs``) and the broker's task names and Celery configuration (``config.broker``).

The bottom layer: every other package of ours may import it; it imports nothing of ours.
"""
