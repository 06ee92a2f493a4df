"""Tokenizers and their files: SentencePiece training, WordPiece, Hugging Face and Marian
tokenizers read in and written out, BERT's word cutting."""
