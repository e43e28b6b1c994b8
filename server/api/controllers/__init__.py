"""The operations: the OpenAI, Anthropic and vLLM serving routes, and thin Litestar controllers for the rest (the
model list, the Responses routes, the admin, reload, ops and status routes).

Public names: the controllers, each owned by its module (``openai.py``, ``serving_routes.py``, ``admin.py``,
``reload.py``, ``ops.py``, ``status_page.py``), ``/v1/models``' entries (``model_cards.py``, for a node and the
cluster) and which bundle holds each stored response (``stored_responses.py``). A serving route is one entry of the
table of operations (``server/frontend/operations.py``), served by ``operation_routes`` (``bundle_routes.py``);
:func:`node_routes` (``routes.py``) lists the routes with their guards, for the app and the Ray ingress's route
table alike. It builds on the edge, admission, streaming and reload packages.
"""

from server.api.controllers.admin import AdminController, SwitchController
from server.api.controllers.model_cards import model_card, served_names
from server.api.controllers.openai import OpenAIController, tokenizer_info
from server.api.controllers.ops import OpsController
from server.api.controllers.reload import ReloadController
from server.api.controllers.routes import node_routes
from server.api.controllers.serving_routes import ResponsesController
from server.api.controllers.status_page import StatusPageController
from server.api.controllers.stored_responses import StoredResponses

__all__ = [
    "AdminController",
    "OpenAIController",
    "OpsController",
    "ReloadController",
    "ResponsesController",
    "StatusPageController",
    "StoredResponses",
    "SwitchController",
    "model_card",
    "node_routes",
    "served_names",
    "tokenizer_info",
]
