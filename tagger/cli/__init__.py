"""The command line (the core never imports it)."""
