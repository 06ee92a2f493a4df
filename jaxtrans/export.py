"""``python -m jaxtrans.export``: a workdir -> a Hugging Face directory (Marian or BERT),
or a CTranslate2 model. The program is jaxtrans/programs/export.py;
this module keeps its name.
"""

from jaxtrans.programs.export import main

if __name__ == "__main__":
    main()
