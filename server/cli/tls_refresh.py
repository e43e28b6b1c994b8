"""``--enable-ssl-refresh``: reload the server's TLS certificate chain when its files change, as `vllm serve` does.

uvicorn builds one ``ssl.SSLContext`` at start-up; loading a new chain into that same context makes every new
TLS handshake use it, while connections already open keep theirs. The watcher runs as one of the app's
background tasks (it starts after uvicorn loaded its config, and is cancelled at shutdown).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["certificate_refresher"]

logger = logging.getLogger("turnout.cli")


def certificate_refresher(config: Any, *, debounce_ms: int = 400) -> Callable[[], Awaitable[None]]:
    """A background task that reloads ``config.ssl``'s chain (and CA bundle) when its files are saved.

    Args:
        config: The ``uvicorn.Config`` the server runs with; its ``ssl`` context exists once it is loaded.
        debounce_ms: How long a burst of file events is gathered before one reload.
    """

    async def refresh() -> None:
        from watchfiles import awatch

        files = [
            Path(name).resolve() for name in (config.ssl_keyfile, config.ssl_certfile, config.ssl_ca_certs) if name
        ]
        folders = sorted({str(path.parent) for path in files})
        async for changes in awatch(*folders, debounce=debounce_ms, recursive=False):
            if not {Path(changed).resolve() for _, changed in changes} & set(files):
                continue
            context = config.ssl
            try:
                context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
                if config.ssl_ca_certs:
                    context.load_verify_locations(config.ssl_ca_certs)
            except (OSError, ValueError) as exc:  # a half-written file: the next save retries
                logger.warning("TLS files changed but could not be loaded (%s); keeping the previous ones", exc)
                continue
            logger.info("reloaded the TLS certificate chain from %s", config.ssl_certfile)

    return refresh
