"""The web service: the FastAPI app, GitHub ingress and the versioned status API. It stores (the
outbox publisher of the workers enqueues); it never runs or selects tests inside a request."""
