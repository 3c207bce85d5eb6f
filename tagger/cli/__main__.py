"""`python -m tagger.cli`: the command line."""

from tagger.cli.app import app

app()
