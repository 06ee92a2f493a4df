"""Evaluate a trained workdir: python evaluate.py --workdir DIR."""

import sys

if __name__ == "__main__":
    sys.stderr.write("error: evaluate.py is not implemented yet\n")
    sys.exit(2)
