"""Talking to the server: the SDK client, retries, the send gate, local-server defaults."""
