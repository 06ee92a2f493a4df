"""The programs: train.py / jaxtrans-train (train.py), evaluate.py / jaxtrans-evaluate
(evaluate.py), and their shared command-line plumbing (cli.py). They parse flags and ask
``jaxtrans.tasks``; nothing below them imports them."""
