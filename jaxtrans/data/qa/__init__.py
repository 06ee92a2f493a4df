"""Question-answering data: SQuAD files, windows with answer positions, the generated story
demo."""
