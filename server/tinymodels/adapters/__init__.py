"""Tiny LoRA adapters for the tiny models, built by tests on demand.

A package of its own on purpose: the tiny models' fingerprint hashes ``server/tinymodels/*.py`` (not
subpackages), so an adapter change does not rebuild the shared model cache.
"""

from server.tinymodels.adapters.lora import LORA_RANK, LORA_TARGETS, build_tiny_lora

__all__ = ["LORA_RANK", "LORA_TARGETS", "build_tiny_lora"]
