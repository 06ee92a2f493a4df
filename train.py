"""Train: python train.py --config configs/NAME.py --workdir DIR [--config.KEY=VALUE ...]."""

from jaxtrans.programs.train import main

if __name__ == "__main__":
    main()
