"""What is asked: prompts, taxonomy, answer schema, structured-output modes, the run plan."""
