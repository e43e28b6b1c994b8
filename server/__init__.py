"""Turnout: one accelerator, many models. An OpenAI-compatible multi-model server on Litestar and vLLM."""

__all__ = ["__version__"]

__version__ = "0.1.0"
