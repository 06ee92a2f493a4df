"""Fine-tune BERT for extractive question answering (SQuAD 1.1 / 2.0).

Starts from --config.init_from: a BERT workdir of train.py or a Hugging Face BERT
checkpoint directory (config.json, weights, vocab.txt); the model's shapes and
vocabulary are the checkpoint's, the qa_outputs head (start and end logits) is new.
BERT's SQuAD recipe (Devlin et al. 2019): AdamW with peak learning rate 3e-5, 10% linear
warm-up then linear decay, batch 32, 2 epochs, dropout 0.1, windows of 384 pieces with a
stride of 128, questions cut at 64 pieces, answers of at most 30 pieces.

    python train.py --config configs/bert_qa.py --workdir runs/squad \\
        --config.init_from=checkpoints/bert-base-uncased \\
        --config.data.qa_train=train-v1.1.json --config.data.qa_dev=dev-v1.1.json
    python evaluate.py --workdir runs/squad            # dev exact match and F1

SQuAD 2.0 (unanswerable questions): add --config.data.version_2_with_negative=True.
Without data.qa_train the built-in story corpus is used (configs/bert_qa_demo.py).
"""

import ml_collections

from jaxtrans.config_sections import dataclass_section
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.tasks.bert.bert_task import FINE_TUNING_FIELDS
from jaxtrans.tasks.run_config import bert_run_config


def get_model_config() -> ml_collections.ConfigDict:
    """The BertConfig fields fine-tuning may set; all others come from the checkpoint."""
    return dataclass_section(BertConfig, only=FINE_TUNING_FIELDS)


def get_config() -> ml_collections.ConfigDict:
    config = bert_run_config()
    config.task = "bert_question_answering"
    # The checkpoint to fine-tune: a BERT workdir or a Hugging Face checkpoint directory.
    config.init_from = ""
    config.model = get_model_config()
    # bfloat16 compute with float32 parameters, as configs/bert_base.py.
    config.model.dtype = "bfloat16"

    # SQuAD training file (.json or .json.gz); "" = the built-in story corpus.
    config.data.qa_train = ""
    # SQuAD development file, scored (exact match, F1) at every evaluation.
    config.data.qa_dev = ""
    # SQuAD test file with answers, for a final report.
    config.data.qa_test = ""
    # SQuAD 2.0: questions may be unanswerable (is_impossible); predict "" when the
    # no-answer score wins. False: every question has an answer (SQuAD 1.1).
    config.data.version_2_with_negative = False
    # Window length: [CLS] question [SEP] context [SEP], in pieces.
    config.data.max_seq_length = 384
    # A long context is read in windows starting this many pieces apart.
    config.data.doc_stride = 128
    # Questions are cut to this many pieces.
    config.data.max_query_length = 64
    # Longest answer predicted, in pieces.
    config.data.max_answer_length = 30
    # Built-in corpus (when qa_train is ""): training questions.
    config.data.qa_demo_questions = 20_000
    # Built-in corpus: dev (and test) questions, about combinations training never shows.
    config.data.qa_demo_eval_questions = 500
    # Built-in corpus: share of unanswerable questions (needs version_2_with_negative).
    config.data.qa_demo_unanswerable = 0.0
    # Built-in corpus: training stories are also asked "Who is {name}?" (answered by the
    # whole name; each kind asked an equal share), a stepping stone to the other two kinds.
    config.data.qa_demo_name_questions = False
    # Built-in corpus: and "Find the {job}." (answered by the job word), the stepping stone
    # to "Who is the {job}?".
    config.data.qa_demo_job_questions = False
    config.data.batch_size = 32

    config.optimizer.learning_rate = 3e-5
    config.optimizer.warmup_steps = 554  # 10% of num_steps

    config.train.num_steps = 5540  # 2 epochs of SQuAD 1.1's 88.6k windows at batch 32
    config.train.log_every = 50
    config.train.checkpoint_every = 1000
    config.train.eval_every = 2770  # once an epoch
    config.train.keep_checkpoints = 2

    config.eval.batch_size = 64
    # SQuAD 2.0: predict no answer when its score exceeds the best span's by more than this.
    config.eval.null_score_diff_threshold = 0.0
    # Score Chinese answers by their characters (each CJK ideograph a word, Unicode
    # punctuation removed); False: the official SQuAD normalisation.
    config.eval.cjk_characters = False
    return config
