"""GitHub's side: webhook signatures and the normalized upstream event."""
