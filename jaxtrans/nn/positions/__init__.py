"""How positions enter the model: one kind a module, ENCODINGS by the name model.position
gives them.

    model.position  module         what it does
    "sinusoidal"    sinusoidal.py  the paper's fixed table added to the token embeddings
    "learned"       learned.py     a learned table of max_len rows added to them (BERT)
    "rope"          rotary.py      self-attention's queries and keys turned (RoPE)

The rest of the model never compares these names: the embeddings, attention, the decoding
cache, the length limits and the exporters ask the config's ``position_encoding`` (a
PositionEncoding, position_encoding.py). A new kind is a module here, its class added to
ENCODINGS, and its tests.
"""

from jaxtrans.nn.positions.learned import LearnedEncoding, LearnedPositions
from jaxtrans.nn.positions.position_encoding import PositionEncoding, Rotary
from jaxtrans.nn.positions.position_ids import default_positions
from jaxtrans.nn.positions.rotary import (
    RotaryEncoding,
    apply_rope,
    rope_angles,
    rope_frequencies,
    rotate_half,
)
from jaxtrans.nn.positions.sinusoidal import SinusoidalEncoding, sinusoidal_embedding

# Every kind, by its model.position name.
ENCODINGS: dict[str, type[PositionEncoding]] = {
    kind.name: kind for kind in (SinusoidalEncoding, LearnedEncoding, RotaryEncoding)
}

__all__ = [
    "ENCODINGS",
    "LearnedEncoding",
    "LearnedPositions",
    "PositionEncoding",
    "Rotary",
    "RotaryEncoding",
    "SinusoidalEncoding",
    "apply_rope",
    "default_positions",
    "rope_angles",
    "rope_frequencies",
    "rotate_half",
    "sinusoidal_embedding",
]
