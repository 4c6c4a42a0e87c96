"""The server's random generators (DESIGN.md contract item 6).

Production: ``numpy.random.Generator`` over randomgen's AES counter-mode generator, keyed from the
operating system's CSPRNG for every request. Test mode only: a seeded generator, so that tests can
reproduce a run; :class:`dpmine_server.settings.Settings` refuses test mode in production.
"""

from __future__ import annotations

import secrets

import numpy as np
import randomgen

__all__ = ["secure_generator", "seeded_generator"]


def secure_generator() -> np.random.Generator:
    """A fresh generator keyed with 128 bits from ``secrets`` (AES-NI when available)."""
    return np.random.Generator(randomgen.AESCounter(key=secrets.randbits(128)))


def seeded_generator(seed: int) -> np.random.Generator:
    """A reproducible generator of the same family. Test mode only."""
    return np.random.Generator(randomgen.AESCounter(seed=seed))
