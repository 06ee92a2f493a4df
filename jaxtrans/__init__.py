"""jaxtrans: encoder-decoder Transformers and BERT in JAX/Flax.

``from jaxtrans import Translator`` (jaxtrans/programs/translator.py) loads a trained translation
run or a Marian directory and translates; it is imported on first use, so that
``import jaxtrans`` stays cheap.
"""

__version__ = "0.1.0"
__all__ = ["Translator", "__version__"]


def __getattr__(name: str):
    if name == "Translator":
        from jaxtrans.programs.translator import Translator

        return Translator
    raise AttributeError(f"module 'jaxtrans' has no attribute {name!r}")
