"""BERT-base pretraining (Devlin et al. 2019): 768/12/3072, 12 layers, masked LM + NSP.

AdamW (beta2 0.999, eps 1e-6, weight decay 0.01 on matrices only, not on biases or
LayerNorm), peak learning rate 1e-4 with 10k linear warm-up steps then linear decay to 0,
256 sequences of 128 tokens per step, 1M steps, dropout 0.1, gradients clipped at 1.0.
(BERT trains the last 10% of its steps at length 512: resume with
--config.data.max_seq_length=512 --config.data.max_predictions_per_seq=80.)

    python train.py --config configs/bert_base.py --workdir runs/bert_base \\
        --config.data.train=wiki.txt.gz,books.txt.gz --config.data.dev=heldout.txt

Text: one sentence a line, a blank line between documents. Without data.train the
built-in demo corpus is used (see configs/bert_demo.py). The SentencePiece vocabulary is
trained into the workdir, or --config.data.hf_checkpoint=DIR uses a checkpoint's vocab.txt.

This is the package's default BERT run config, jaxtrans.tasks.run_config.bert_run_config();
the other BERT configs start from it.
"""

import ml_collections

from jaxtrans.tasks.run_config import bert_model_section, bert_run_config


def get_model_config() -> ml_collections.ConfigDict:
    """The model section (BertConfig's fields less those set from the tokenizer)."""
    return bert_model_section()


def get_config() -> ml_collections.ConfigDict:
    return bert_run_config()
