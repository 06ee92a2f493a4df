"""The data fields a question-answering run adds to a BERT run's data section, with their
defaults (suited to SQuAD 1.1 with the base model).

    add_qa_data_fields(data)   ``data`` with every question-answering field, at its default

Used by configs/bert_qa.py, by the completion of an older config.json's data section
(jaxtrans.tasks.run_config.task_sections) and by a Hugging Face directory scored as it is
(BertQuestionAnsweringTask.pretrained_data_defaults): the defaults live here only.
"""

import ml_collections


def add_qa_data_fields(data: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """``data`` (a BERT data section, changed in place and returned) with the fields of a
    question-answering run, each at its default."""
    # SQuAD training file (.json or .json.gz); "" = the built-in story corpus.
    data.qa_train = ""
    # SQuAD development file, scored (exact match, F1) at every evaluation.
    data.qa_dev = ""
    # SQuAD test file with answers, for a final report.
    data.qa_test = ""
    # SQuAD 2.0: questions may be unanswerable (is_impossible); predict "" when the
    # no-answer score wins. False: every question has an answer (SQuAD 1.1).
    data.version_2_with_negative = False
    # A long context is read in windows starting this many pieces apart.
    data.doc_stride = 128
    # Questions are cut to this many pieces.
    data.max_query_length = 64
    # Longest answer predicted, in pieces.
    data.max_answer_length = 30
    # Built-in corpus (when qa_train is ""): training questions.
    data.qa_demo_questions = 20_000
    # Built-in corpus: dev (and test) questions, about combinations training never shows.
    data.qa_demo_eval_questions = 500
    # Built-in corpus: share of unanswerable questions (needs version_2_with_negative).
    data.qa_demo_unanswerable = 0.0
    # Built-in corpus: training stories are also asked "Who is {name}?" (answered by the
    # whole name; each kind asked an equal share), a stepping stone to the other two kinds.
    data.qa_demo_name_questions = False
    # Built-in corpus: and "Find the {job}." (answered by the job word), the stepping stone
    # to "Who is the {job}?".
    data.qa_demo_job_questions = False
    return data
