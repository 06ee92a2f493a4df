"""Reserved token ids: the one definition every layer uses.

Every vocabulary jaxtrans trains or loads numbers these the same (jaxtrans.data.reserved_pieces
reserves their pieces in SentencePiece models); the masks treat padding as "not a token",
the decoders start from BOS and stop at EOS.
"""

# Padding: never attended to, never a target.
PAD_ID = 0
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
# Ids below this are never produced by encoding ordinary text.
NUM_RESERVED_IDS = 7
