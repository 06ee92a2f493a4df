"""BERT: the model and its heads, Hugging Face directories in and out."""
