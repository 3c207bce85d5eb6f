"""The cascade: the cheap model where it is right, the strong one where it is not.

Its statistics (certify, hypergeom, order, plan) are pure: no I/O and nothing from the rest
of tagger. The drivers ask the Certifier which rows the strong model labels and which it
answers; the Certifier never sends a request.
"""

from tagger.cascade.certify import CascadeDecision, CascadeTarget, Certifier

__all__ = ["CascadeDecision", "CascadeTarget", "Certifier"]
