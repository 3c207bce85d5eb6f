"""The OpenAI Batch API: submit, wait (or leave), collect into the cache, write rows live-style."""
