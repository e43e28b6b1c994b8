"""Thin Litestar controllers: OpenAI routes, admin routes, ops routes."""

from server.api.controllers.admin import AdminController, SwitchController
from server.api.controllers.openai import OpenAIController, TokenizeController
from server.api.controllers.ops import OpsController

__all__ = ["AdminController", "OpenAIController", "OpsController", "SwitchController", "TokenizeController"]
