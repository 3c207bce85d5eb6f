"""The cascade: the cheap model where it is right, the strong one where it is not."""
