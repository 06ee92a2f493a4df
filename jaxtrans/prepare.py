"""``python -m jaxtrans.prepare``: a translation run's training data tokenised into its id
shards ahead of training. The program is jaxtrans/programs/prepare.py;
this module keeps its name.
"""

from jaxtrans.programs.prepare import main

if __name__ == "__main__":
    main()
