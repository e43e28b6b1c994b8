"""Admission: who gets in, a connection to the HTTP server and a serving request to its model's bundle.

Public names, by the module that owns them: the serving request's admission through Litestar DI, its lease holder
and the bundle protocol every route answers through (``request_admission.py``); the header and body read timeouts
and the cap on open connections (``connection_limits.py``); a ``background: true`` Response that holds its model
until it ends (``background_responses.py``). It builds on the edge checks and the error shapes; the streaming
package delivers what it admits.
"""

from server.api.admission.background_responses import hold_background_response
from server.api.admission.connection_limits import ConnectionLimits, OpenConnections, limited_protocol
from server.api.admission.request_admission import (
    AdmissionTarget,
    AdmittedRequest,
    Holder,
    ServingBundle,
    admission_target,
    check_serves_form,
    install_abort_hook,
)

__all__ = [
    "AdmissionTarget",
    "AdmittedRequest",
    "ConnectionLimits",
    "Holder",
    "OpenConnections",
    "ServingBundle",
    "admission_target",
    "check_serves_form",
    "hold_background_response",
    "install_abort_hook",
    "limited_protocol",
]
