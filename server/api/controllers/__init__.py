"""Thin Litestar controllers: OpenAI routes, admin routes, ops routes."""

from server.api.controllers.admin import AdminController, SwitchController
from server.api.controllers.openai import OpenAIController, TokenizeController
from server.api.controllers.ops import OpsController
from server.api.controllers.reload import ReloadController
from server.api.controllers.status_page import StatusPageController

__all__ = [
    "AdminController",
    "OpenAIController",
    "OpsController",
    "ReloadController",
    "StatusPageController",
    "SwitchController",
    "TokenizeController",
]
