"""Turnout replicas on Ray Serve: node replicas that each run an engine manager over the profile, an OpenAI
ingress that routes by model (Ray's model multiplexing), and the cluster view (``/v1/models``, ``/admin/status``).

Needs the ``ray`` extra (``pip install -e '.[ray]'``). The layer sits above ``api``: a node serves requests
through Turnout's own app, and only the CLI imports this package.
"""

from __future__ import annotations

__all__: list[str] = []
