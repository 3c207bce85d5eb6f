"""`python -m tagger`: the command line."""

from tagger.cli.app import app

app()
