"""A tiny Whisper speech model (transcription and translation), built by tests on demand.

A package of its own on purpose: the tiny Llamas' fingerprint hashes ``server/tinymodels/*.py`` (not
subpackages), so the speech model's code does not rebuild the shared Llama cache.
"""

from server.tinymodels.speech.whisper import TINY_WHISPER, WHISPER_ANSWER_TOKEN, build_tiny_whisper

__all__ = ["TINY_WHISPER", "WHISPER_ANSWER_TOKEN", "build_tiny_whisper"]
