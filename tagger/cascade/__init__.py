"""The cascade's statistics: which cheap answers to keep, with a finite-sample guarantee.

Pure: no I/O and nothing from the rest of tagger; the drivers (live, batch, Ray) ask the
Certifier which rows to label with the strong model and which to escalate.
"""

from tagger.cascade.certify import CascadeDecision, CascadeTarget, Certifier

__all__ = ["CascadeDecision", "CascadeTarget", "Certifier"]
