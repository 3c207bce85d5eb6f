"""tagger on Ray Data: one rate limit and one spend cap for a whole cluster (`tagger[ray]`).

Nothing here imports Ray until it is used: `import tagger.ray` works without it.
"""

from __future__ import annotations
