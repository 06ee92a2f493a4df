"""Compile-ahead: a run's programs compiled for machines it need not have."""
