"""The ground floor: settings, the database (engine, sessions, models, data access), the broker's
task names and configuration, structured logs, and the outcome vocabulary.

Every other package of ours may import it; it imports nothing of ours.
"""
