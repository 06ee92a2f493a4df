"""Evaluate a trained workdir: python evaluate.py --workdir DIR [--split test|dev] [...]."""

from jaxtrans.programs.evaluate import main

if __name__ == "__main__":
    main()
