"""Once per run, before the first chat request: is --model among the models the server lists,
and is it still served? (GET /models, bounded, with a deadline: tagger.sending.models.)"""

from __future__ import annotations

import asyncio
import logging

from tagger.config import ClientConfig
from tagger.errors import FatalAPIError, SendingStopped
from tagger.logcontext import about_the_run
from tagger.sending.gate import SendGate
from tagger.sending.models import Listing, check_model, names_deployments
from tagger.sending.params import RequestRules

__all__ = ["ModelCheck"]
log = logging.getLogger(__name__)


class ModelCheck:
    """The model judged against GET /models once, however many requests wait for it."""

    def __init__(
        self, config: ClientConfig, rules: RequestRules, gate: SendGate, *, done: bool
    ) -> None:
        """done: the caller already judged the model (a batch job, before its canary and its
        live leftovers): not listed, nor warned about, again."""
        self._config = config
        self._rules = rules
        self._gate = gate
        self._done = done
        self._check: asyncio.Future[None] | None = None
        self._refused = False  # the check failed and one abstract said so
        self.listing: Listing | None = None  # what GET /models said (None: unreadable)
        self.listings = 0  # GET /models sent

    async def wait(self) -> None:
        """Return once the model is judged fit; FatalAPIError (stopping the gate) the first
        time it is not, SendingStopped for every request after. Ctrl-C ends it at once."""
        if self._done:
            return
        if self._check is None:
            self.listings += not names_deployments(self._config.effective_base_url)
            self._check = asyncio.ensure_future(self._read_listing())
        try:
            await asyncio.shield(self._check)
        except FatalAPIError as exc:
            if self._refused:  # told once; the other abstracts are not run
                raise SendingStopped(str(exc)) from None
            self._refused = True
            self._gate.stop(str(exc))
            raise

    async def _read_listing(self) -> None:
        with about_the_run():  # its warnings are the run's, not the first abstract's
            self.listing = await check_model(self._config)
        listing = self.listing
        # The server lists the model as OpenAI's: its rules, though the host is not.
        owned = listing is not None and listing.openai_owned(self._config.model)
        if owned and self._rules.serve_as_openai():
            log.info(
                "the server lists %s as OpenAI's: %s", self._config.model, self._rules.describe()
            )
