"""The effort levels of adaptive thinking (Anthropic's ``output_config.effort``), where
the model decides how long to think (:attr:`GenerationSettings.reasoning_adaptive
<stateway.core.generation_settings.GenerationSettings.reasoning_adaptive>`, at its
``reasoning_effort``).

One list for both directions: a Messages client's level is taken as it is, and one the
gateway does not know (a level Anthropic adds later) as :data:`ADAPTIVE_DEFAULT`; an
Anthropic upstream is sent these levels as they are, and any other effort mapped onto
them.
"""

from __future__ import annotations

from typing import Final

ADAPTIVE_EFFORTS: Final = ("low", "medium", "high", "xhigh", "max")
"""The levels Anthropic takes, from the least thinking to the most."""
ADAPTIVE_DEFAULT: Final = "high"
"""Anthropic's level when none is given; the gateway's for a level it does not know."""
