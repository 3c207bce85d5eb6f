"""Files in and out: abstracts, spreadsheets, output rows and the output file."""
