"""The wire formats we speak, as pure values: GitHub webhooks (signatures, the normalized
upstream event) and PyTorch's Cross-Repository CI Relay (callback bodies, dispatch payloads, the
allowlist grammar, the HUD envelope). Imports nothing of ours."""
