"""One run: tag each abstract, cache answers, write rows in input order."""
