"""Audio for the speech tests: a sine tone as a WAV file, written with the stdlib ``wave`` module."""

from __future__ import annotations

import io
import math
import struct
import wave

__all__ = ["sine_wav"]


def sine_wav(seconds: float = 1.0, rate: int = 8000, hertz: float = 440.0) -> bytes:
    """A mono 16-bit WAV of a sine tone (8 kHz by default: vLLM resamples it to Whisper's 16 kHz)."""
    frames = b"".join(
        struct.pack("<h", int(0.3 * 32767 * math.sin(2 * math.pi * hertz * i / rate)))
        for i in range(int(seconds * rate))
    )
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames)
    return buffer.getvalue()
