"""The GitHub webhook endpoint (``POST /github/webhook``)."""
