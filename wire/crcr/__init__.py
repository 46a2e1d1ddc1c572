"""CRCR's side: callback bodies (downstream -> relay, schema "1"), the allowlist, the HUD envelope."""
