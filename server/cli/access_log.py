"""``--disable-access-log-for-endpoints``: leave requests to some paths out of uvicorn's access log."""

from __future__ import annotations

import logging
from collections.abc import Collection

__all__ = ["AccessLogPathFilter", "exclude_from_access_log"]

#: uvicorn's access logger; its records' args are (client, method, path with query, HTTP version, status).
_ACCESS_LOGGER = "uvicorn.access"


class AccessLogPathFilter(logging.Filter):
    """Drops access-log records whose path (query string aside) is one of ``paths``, as vLLM's filter does."""

    def __init__(self, paths: Collection[str]) -> None:
        super().__init__()
        self.paths = frozenset(paths)

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is logged."""
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3:
            path = str(args[2]).split("?", 1)[0]
            return path not in self.paths
        return True


def exclude_from_access_log(paths: Collection[str]) -> None:
    """Install the filter on uvicorn's access logger (nothing when ``paths`` is empty).

    A filter on the logger survives uvicorn's own logging set-up, which replaces handlers but not filters.
    """
    if paths:
        logging.getLogger(_ACCESS_LOGGER).addFilter(AccessLogPathFilter(paths))
