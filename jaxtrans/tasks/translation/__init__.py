"""The translation task, the Marian directory as its starting point, its export, its decoding
settings."""
