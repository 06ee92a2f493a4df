"""Train a model: python train.py --config configs/NAME.py --workdir DIR."""

import sys

if __name__ == "__main__":
    sys.stderr.write("error: train.py is not implemented yet\n")
    sys.exit(2)
