"""A run's directory: its files, its checkpoints and their choice."""
