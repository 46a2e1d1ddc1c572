"""The Celery workers: one module per stage of the loop (:mod:`.ingest`, :mod:`.plan`,
:mod:`.run`, :mod:`.report`), the supervisors (:mod:`.sweep`, :mod:`.schedule`) and the
test-running :mod:`.harness`. No selection logic and no HTTP routing live here."""
