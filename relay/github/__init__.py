"""The GitHub connection: webhook signatures, ingress, and the upstream event model."""
