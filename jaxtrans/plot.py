"""``python -m jaxtrans.plot``: training curves of a run, or the pictures of how the model
works. The program is jaxtrans/programs/plot.py;
this module keeps its name.
"""

from jaxtrans.programs.plot import main

if __name__ == "__main__":
    main()
