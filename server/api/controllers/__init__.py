"""Thin Litestar controllers: OpenAI, Anthropic and vLLM serving routes, admin routes, ops routes."""

from server.api.controllers.admin import AdminController, SwitchController
from server.api.controllers.openai import OpenAIController, TokenizeController, tokenizer_info
from server.api.controllers.ops import OpsController
from server.api.controllers.reload import ReloadController
from server.api.controllers.serving_routes import (
    MessagesController,
    ResponsesController,
    ServingController,
    SpeechController,
)
from server.api.controllers.status_page import StatusPageController

__all__ = [
    "AdminController",
    "MessagesController",
    "OpenAIController",
    "OpsController",
    "ReloadController",
    "ResponsesController",
    "ServingController",
    "SpeechController",
    "StatusPageController",
    "SwitchController",
    "TokenizeController",
    "tokenizer_info",
]
