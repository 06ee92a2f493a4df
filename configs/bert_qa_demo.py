"""Question answering on the built-in story corpus, from scratch: minutes on a CPU.

    python train.py --config configs/bert_qa_demo.py --workdir runs/qa_demo
    python evaluate.py --workdir runs/qa_demo          # dev exact match and F1

A small BERT (4 pre-norm layers of width 64, rotary positions, no dropout) with a BPE
vocabulary trained on the stories learns to find one person's surname, or the person with
a job, among three (jaxtrans/data/qa/demo.py); a fifth of the questions are unanswerable
(SQuAD 2.0). Dev questions ask for pairs no training story holds. Two training-only kinds,
a quarter of the training questions each, are the steps the dev questions are built on:
"Who is Mira?" (answered by the whole name) and "Find the poet." (the job word). Without
them, which kinds the 2000 steps learned depended on the seed and on floating-point
details (dev exact match 0.998 with seed 0, 0.52 to 0.62 with seeds 1 to 3; with the name
questions alone, 0.780 for seed 2 with the batch over two devices). With both, dev exact
match 1.000 with each of seeds 0 to 3, on one device and on two, every kind learned by
step 750; train + evaluate 240 s on an idle 2-core CPU. docs/bert.md gives the figures
per seed, the time, and the table of what was tried.
"""

import ml_collections

from configs import bert_qa
from jaxtrans.tasks.run_config import bert_model_section


def get_config() -> ml_collections.ConfigDict:
    config = bert_qa.get_config()
    config.init_from = ""  # a fresh model of the shape below
    config.model = bert_model_section()
    config.model.d_model = 64
    config.model.num_heads = 4
    config.model.d_ff = 256
    # Finding "the word after the name (or job) asked for" takes a head that looks at the
    # previous word and one that matches it with the question. Two post-norm layers learned
    # only the surnames in 2000 steps, three never left choosing at random; four pre-norm
    # layers with the name and job questions below learn both kinds (docs/bert.md).
    config.model.num_layers = 4
    config.model.norm = "pre"
    # Rotary positions: attending to "the word before" is learned faster than with BERT's
    # learned absolute positions.
    config.model.position = "rope"
    config.model.max_len = 64
    config.model.dropout_rate = 0.0
    config.model.attention_dropout_rate = 0.0
    # A CPU's recipe: float32 compute (bfloat16 is emulated on a CPU, slower), threefry
    # dropout masks; configs/bert_qa.py's are for GPUs and TPUs.
    config.model.dtype = "float32"

    # BPE: every word of the stories becomes one piece (an upper bound; about 1,200).
    config.data.spm_model_type = "bpe"
    config.data.vocab_size = 8000
    config.data.character_coverage = 1.0
    config.data.version_2_with_negative = True
    config.data.qa_demo_unanswerable = 0.2
    config.data.qa_demo_questions = 20_000
    # "Who is Mira?" -> "Mira Holm": its start is the word the question names (one head
    # matches the two), its end the word after it, so the two heads the dev questions need
    # are learned one at a time instead of together. Without it, whether the surnames were
    # learned in 2000 steps hung on the seed.
    config.data.qa_demo_name_questions = True
    # "Find the poet." -> "poet": the job word itself, matched with the question's by one
    # head; "Who is the poet?" starts at the word after it, as a surname stands after the
    # name asked for. Without it "Who is the ...?" was learned late or not at all for some
    # seeds (seed 2 with the batch over two devices: dev exact match 0.78 after 2000 steps).
    config.data.qa_demo_job_questions = True
    config.data.qa_demo_eval_questions = 500
    config.data.max_seq_length = 64
    config.data.doc_stride = 32
    config.data.max_query_length = 16
    config.data.max_answer_length = 5
    config.data.batch_size = 32

    # 1e-3 rather than 3e-3: at 3e-3, even with the name questions, seed 2 never learned
    # "Who is the ...?" in 2000 steps (0.664); at 1e-3 it did by step 1500 on one device.
    config.optimizer.learning_rate = 1e-3
    config.optimizer.warmup_steps = 100

    config.train.num_steps = 2000
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.train.eval_every = 1000
    config.train.dropout_rng_impl = "threefry"

    config.eval.batch_size = 64
    return config
