"""Named-entity data: CoNLL tag files, windows with labels on first pieces, the generated
entity demo."""
