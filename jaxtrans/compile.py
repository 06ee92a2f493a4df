"""``python -m jaxtrans.compile``: a run's train step compiled for a TPU slice or GPU machine
it does not need. The program is jaxtrans/programs/compile.py;
this module keeps its name.
"""

from jaxtrans.programs.compile import main

if __name__ == "__main__":
    main()
