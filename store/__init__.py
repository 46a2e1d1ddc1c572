"""The database: engine and sessions, models, data access by aggregate (deliveries, jobs, shards,
results, outbox, HUD queries), the group-commit writer, and the outcome vocabulary.

Routes and workers call these modules; they do not build queries. It imports only ``config``.
"""
