"""Reserved token ids, the same in every SentencePiece model jaxtrans trains.

The translation model and the BERT pipeline share tokenizer code, so the BERT symbols
are reserved (as user-defined pieces) even in models trained only for translation.
"""

# Padding: defined with the masks, which treat it as "not a token" (nn imports no data).
from jaxtrans.nn.masks import PAD_ID as PAD_ID

# End of sentence, appended to every source and target.
EOS_ID = 1
# Beginning of sentence, the first decoder input.
BOS_ID = 2
# Unknown piece (characters outside the coverage of the model).
UNK_ID = 3
# BERT classification token.
CLS_ID = 4
# BERT separator between segments.
SEP_ID = 5
# BERT masked-language-model mask.
MASK_ID = 6

PAD_PIECE = "<pad>"
EOS_PIECE = "</s>"
BOS_PIECE = "<s>"
UNK_PIECE = "<unk>"
# Pieces 4, 5, 6 in this order (SentencePiece numbers user-defined symbols after unk).
USER_DEFINED_PIECES = ("[CLS]", "[SEP]", "[MASK]")
# Ids below this are never produced by encoding ordinary text.
NUM_RESERVED_IDS = 7
