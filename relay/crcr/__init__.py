"""The CRCR connection: callback bodies (downstream -> relay, schema "1") and the HUD envelope."""
