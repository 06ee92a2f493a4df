"""Reserved pieces of every SentencePiece model jaxtrans trains, at the reserved ids
(defined once, in jaxtrans.vocab; re-exported here for the data code).

The translation model and the BERT pipeline share tokenizer code, so the BERT symbols
are reserved (as user-defined pieces) even in models trained only for translation.
"""

from jaxtrans.vocab import (  # noqa: F401 - the ids, defined once for every layer
    BOS_ID,
    CLS_ID,
    EOS_ID,
    MASK_ID,
    NUM_RESERVED_IDS,
    PAD_ID,
    SEP_ID,
    UNK_ID,
)

PAD_PIECE = "<pad>"
EOS_PIECE = "</s>"
BOS_PIECE = "<s>"
UNK_PIECE = "<unk>"
# Pieces 4, 5, 6 in this order (SentencePiece numbers user-defined symbols after unk).
USER_DEFINED_PIECES = ("[CLS]", "[SEP]", "[MASK]")
