"""Marian (opus-mt): config.json, Hugging Face directories in and out."""
