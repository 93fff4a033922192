"""A synthetic two-speaker conversation: its vocabulary and speakers, and random
utterances drawn from them. Shared by the ranking congruence test
(tests/unit/test_ranking_congruence.py) and benchmarks/retrieve_at_scale.py, so it imports
nothing of pytest."""

from __future__ import annotations

import random
from collections.abc import Sequence

WORDS = (
    "kitten",
    "lease",
    "marathon",
    "shift",
    "workshop",
    "sailing",
    "regatta",
    "walnut",
    "table",
    "hospital",
    "nurse",
    "pottery",
    "class",
    "neighbour",
    "recital",
    "piano",
    "boat",
    "harbour",
    "winter",
    "coat",
    "shelter",
    "festival",
    "garden",
    "hens",
    "eggs",
    "chess",
    "tournament",
    "flat",
    "lisbon",
    "ramen",
    "bike",
    "wheel",
    "report",
    "friday",
    "lemon",
    "bowl",
    "watercolor",
    "zoo",
    "trail",
    "camp",
    "tent",
    "storm",
    "ferry",
    "island",
    "bakery",
    "sourdough",
    "violin",
    "choir",
    "museum",
    "ticket",
    "train",
)
SPEAKERS = ("Ana", "Ben")


def utterance(rng: random.Random, fewest: int, most: int, words: Sequence[str] = WORDS) -> str:
    """Between `fewest` and `most` of `words` (default the whole vocabulary), picked by
    `rng`."""
    return " ".join(rng.choice(words) for _ in range(rng.randint(fewest, most)))
