"""After a run: gold sets, evaluation, comparison, tag statistics."""
