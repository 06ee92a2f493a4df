"""configs/bert_qa_demo.py is the run docs/bert.md measures ("The question-answering demo
run"): its model, corpus and schedule, without training it (that takes minutes)."""

import sys

from paths import REPO

if REPO not in sys.path:
    sys.path.insert(0, REPO)

from configs import bert_qa_demo  # noqa: E402
from jaxtrans.models import BertConfig  # noqa: E402


def test_the_demo_is_the_measured_model_corpus_and_schedule():
    config = bert_qa_demo.get_config()
    assert config.task == "bert_question_answering" and config.init_from == ""
    model = BertConfig.from_dict({**config.model.to_dict(), "vocab_size": 807})
    shape = (model.num_layers, model.d_model, model.num_heads, model.d_ff, model.norm)
    assert shape == (4, 64, 4, 256, "pre") and model.position == "rope"
    assert model.dropout_rate == model.attention_dropout_rate == 0.0
    data = config.data
    assert data.qa_train == "" and data.qa_demo_name_questions and data.qa_demo_job_questions
    assert (data.qa_demo_questions, data.qa_demo_eval_questions) == (20_000, 500)
    assert data.version_2_with_negative and data.qa_demo_unanswerable == 0.2
    assert (data.max_seq_length, data.batch_size) == (64, 32)
    optimizer = config.optimizer
    assert (optimizer.schedule, optimizer.learning_rate, optimizer.warmup_steps) == (
        "linear", 1e-3, 100,
    )  # fmt: skip
    assert config.train.num_steps == 2000
