"""tagger: tag research-paper abstracts with an LLM."""

__version__ = "0.1.0"
