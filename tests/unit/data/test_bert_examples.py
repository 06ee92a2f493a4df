"""BERT pretraining examples: layout, next-sentence pairs, masking statistics, resuming.

The corpus here is made of token ids that say where they come from: every token of
sentence s of document d is ``7 + d * MAX_SENTENCES + s``, so a test can tell from the
ids alone which document and sentence any part of an example was taken from.
"""

import gzip
import json
import math

import numpy as np
import pytest

from jaxtrans.data.bert.pretraining_examples import (
    BATCH_KEYS,
    PretrainingOptions,
    TokenizedCorpus,
    plan_chunks,
    pretraining_iterator,
    read_documents,
    truncate_pair,
)
from jaxtrans.data.reserved_pieces import CLS_ID, MASK_ID, NUM_RESERVED_IDS, PAD_ID, SEP_ID
from jaxtrans.errors import UserError

MAX_SENTENCES = 10


class IdTokenizer:
    """The special ids of a jaxtrans SentencePiece model; texts are never encoded here."""

    def __init__(self, num_documents: int):
        self.vocab_size = NUM_RESERVED_IDS + num_documents * MAX_SENTENCES
        self.pad_id, self.cls_id, self.sep_id, self.mask_id = PAD_ID, CLS_ID, SEP_ID, MASK_ID
        self.special_ids = frozenset(range(NUM_RESERVED_IDS))


def traceable_corpus(num_documents: int, seed: int = 0, max_len: int = 6) -> TokenizedCorpus:
    """Documents of 1..MAX_SENTENCES sentences of 2..max_len tokens, each id = its origin."""
    rng = np.random.default_rng(seed)
    documents = []
    for d in range(num_documents):
        sentences = int(rng.integers(1, MAX_SENTENCES + 1))
        documents.append(
            [
                [NUM_RESERVED_IDS + d * MAX_SENTENCES + s] * int(rng.integers(2, max_len + 1))
                for s in range(sentences)
            ]  # fmt: skip
        )
    return TokenizedCorpus.from_token_lists(documents)


def origin(token_id) -> tuple[int, int]:
    """(document, sentence) of a corpus token."""
    return divmod(int(token_id) - NUM_RESERVED_IDS, MAX_SENTENCES)


def batches(corpus, options, count, seed=0, batch_size=32, num_documents=None):
    tokenizer = IdTokenizer(num_documents or corpus.num_documents)
    it = pretraining_iterator(
        corpus, tokenizer, options, batch_size=batch_size, seed=seed, prefetch_batches=0
    )
    return [next(it) for _ in range(count)]


def examples(batch_list):
    """Batches -> list of per-example dicts."""
    for batch in batch_list:
        for i in range(len(batch["input_ids"])):
            yield {key: value[i] for key, value in batch.items()}


def unmasked(example) -> np.ndarray:
    """The example's real tokens with the original ids put back at the masked positions."""
    ids = example["input_ids"].copy()
    chosen = example["masked_weights"] == 1
    ids[example["masked_positions"][chosen]] = example["masked_ids"][chosen]
    return ids[example["attention_mask"] == 1]


def split_segments(example):
    """(A, B) token arrays of an example, read from its token types."""
    ids = unmasked(example)
    types = example["token_type_ids"][: len(ids)]
    first_sep = int(np.sum(types == 0)) - 1
    return ids[1:first_sep], ids[first_sep + 1 : -1]


def within(count: float, expected: float, sd: float, sigmas: float = 4.0) -> bool:
    return abs(count - expected) <= sigmas * sd


# Short documents and a long max_seq_length: no example is ever truncated, so A and B
# are whole sentences and "B follows A" can be checked exactly.
UNTRUNCATED = PretrainingOptions(max_seq_length=128, max_predictions_per_seq=20, short_seq_prob=0)


@pytest.fixture(scope="module")
def nsp_examples():
    corpus = traceable_corpus(60)
    return list(examples(batches(corpus, UNTRUNCATED, 40)))


def test_batches_are_fixed_shape_int32(nsp_examples):
    corpus = traceable_corpus(20)
    options = PretrainingOptions(max_seq_length=48, max_predictions_per_seq=7)
    batch = batches(corpus, options, 1, batch_size=5)[0]
    assert sorted(batch) == sorted(BATCH_KEYS)
    for key in BATCH_KEYS:
        assert batch[key].dtype == np.int32, key
    assert batch["input_ids"].shape == batch["token_type_ids"].shape == (5, 48)
    assert batch["attention_mask"].shape == (5, 48)
    assert batch["masked_positions"].shape == batch["masked_ids"].shape == (5, 7)
    assert batch["masked_weights"].shape == (5, 7)
    assert batch["next_sentence_label"].shape == (5,)


def test_layout_is_cls_a_sep_b_sep_with_token_types(nsp_examples):
    for ex in nsp_examples:
        n = int(ex["attention_mask"].sum())
        assert np.all(ex["attention_mask"][:n] == 1) and np.all(ex["attention_mask"][n:] == 0)
        ids, types = unmasked(ex), ex["token_type_ids"]
        a, b = split_segments(ex)
        assert len(a) >= 1 and len(b) >= 1
        assert list(ids) == [CLS_ID, *a, SEP_ID, *b, SEP_ID]
        assert list(types[:n]) == [0] * (len(a) + 2) + [1] * (len(b) + 1)
        assert np.all(types[n:] == 0) and np.all(ex["input_ids"][n:] == PAD_ID)
        assert not np.isin(np.concatenate([a, b]), list(range(NUM_RESERVED_IDS))).any()


def test_true_next_sentence_continues_the_same_document(nsp_examples):
    for ex in (e for e in nsp_examples if e["next_sentence_label"] == 0):
        a, b = split_segments(ex)
        a_origin = [origin(t) for t in dict.fromkeys(a.tolist())]
        b_origin = [origin(t) for t in dict.fromkeys(b.tolist())]
        (document,) = {d for d, _ in a_origin + b_origin}
        sentences = [s for _, s in a_origin + b_origin]
        # A then B: consecutive sentences of one document, B starting right after A.
        assert sentences == list(range(sentences[0], sentences[0] + len(sentences)))
        assert b_origin[0][1] == a_origin[-1][1] + 1, document


def test_random_next_sentence_comes_from_another_document(nsp_examples):
    randoms = [e for e in nsp_examples if e["next_sentence_label"] == 1]
    for ex in randoms:
        a, b = split_segments(ex)
        a_documents = {origin(t)[0] for t in a}
        b_documents = {origin(t)[0] for t in b}
        assert len(a_documents) == 1 and len(b_documents) == 1
        assert a_documents != b_documents
    # B is drawn from many documents, not one favourite.
    assert len({origin(split_segments(e)[1][0])[0] for e in randoms}) > 30


def test_next_sentence_labels_are_half_random():
    corpus = traceable_corpus(60)
    labels = np.concatenate([b["next_sentence_label"] for b in batches(corpus, UNTRUNCATED, 200)])
    n = len(labels)
    assert within(labels.sum(), 0.5 * n, math.sqrt(n * 0.25))


@pytest.fixture(scope="module")
def masking_examples():
    # Long enough examples for plenty of candidates; the cap never binds (0.15 * 61 < 40).
    corpus = traceable_corpus(200, seed=1, max_len=8)
    options = PretrainingOptions(max_seq_length=64, max_predictions_per_seq=40)
    return list(examples(batches(corpus, options, 60)))


def candidate_count(example) -> int:
    return int(example["attention_mask"].sum()) - 3  # all but [CLS] and two [SEP]


def test_each_example_masks_fifteen_percent_rounded_up_or_down(masking_examples):
    for ex in masking_examples:
        expected = 0.15 * candidate_count(ex)
        assert int(ex["masked_weights"].sum()) in (math.floor(expected), math.ceil(expected))


def test_fifteen_percent_of_tokens_are_chosen_overall(masking_examples):
    chosen = sum(int(e["masked_weights"].sum()) for e in masking_examples)
    candidates = sum(candidate_count(e) for e in masking_examples)
    # The count is 0.15 n rounded up with probability frac(0.15 n): a sum of independent
    # Bernoulli(frac) variables around the exact expectation 0.15 * candidates.
    fracs = [0.15 * candidate_count(e) % 1 for e in masking_examples]
    sd = math.sqrt(sum(f * (1 - f) for f in fracs))
    assert within(chosen, 0.15 * candidates, sd)
    assert within(chosen, 0.15 * candidates, math.sqrt(candidates * 0.15 * 0.85))


def test_chosen_tokens_are_80_mask_10_random_10_unchanged(masking_examples):
    mask = random = unchanged = 0
    replacement_ids = []
    for ex in masking_examples:
        chosen = ex["masked_weights"] == 1
        shown = ex["input_ids"][ex["masked_positions"][chosen]]
        original = ex["masked_ids"][chosen]
        mask += int(np.sum(shown == MASK_ID))
        unchanged += int(np.sum(shown == original))
        others = shown[(shown != MASK_ID) & (shown != original)]
        random += len(others)
        replacement_ids.extend(others.tolist())
    total = mask + random + unchanged
    pool = IdTokenizer(200).vocab_size - NUM_RESERVED_IDS  # a random token may equal the original
    for count, p in (
        (mask, 0.8),
        (random, 0.1 * (1 - 1 / pool)),
        (unchanged, 0.1 + 0.1 / pool),
    ):
        assert within(count, p * total, math.sqrt(total * p * (1 - p))), (count, p, total)
    assert min(replacement_ids) >= NUM_RESERVED_IDS  # never a special token
    assert len(set(replacement_ids)) > 0.5 * len(replacement_ids)  # spread over the vocab


def test_special_tokens_are_never_chosen(masking_examples):
    for ex in masking_examples:
        n = int(ex["attention_mask"].sum())
        first_sep = int(np.sum(ex["token_type_ids"][:n] == 0)) - 1
        chosen = ex["masked_positions"][ex["masked_weights"] == 1]
        assert not np.isin(chosen, [0, first_sep, n - 1]).any()
        assert np.all(chosen < n)
        predicted = ex["masked_ids"][ex["masked_weights"] == 1]
        assert not np.isin(predicted, [PAD_ID, CLS_ID, SEP_ID]).any()
        assert len(set(chosen.tolist())) == len(chosen)


def test_padding_predictions_have_zero_weight_and_follow_real_ones(masking_examples):
    for ex in masking_examples:
        k = int(ex["masked_weights"].sum())
        assert np.all(ex["masked_weights"][:k] == 1)
        assert np.all(ex["masked_positions"][k:] == 0) and np.all(ex["masked_ids"][k:] == 0)


def test_at_most_max_predictions_per_seq():
    corpus = traceable_corpus(100, max_len=8)
    options = PretrainingOptions(max_seq_length=64, max_predictions_per_seq=3)
    counts = [int(e["masked_weights"].sum()) for e in examples(batches(corpus, options, 10))]
    assert max(counts) == 3  # the cap binds (0.15 * 61 > 3) and holds


def test_sequences_never_exceed_max_seq_length_and_short_ones_occur():
    corpus = traceable_corpus(100, max_len=20)  # documents far longer than 32 tokens
    options = PretrainingOptions(max_seq_length=32, short_seq_prob=0.3)
    lengths = [int(e["attention_mask"].sum()) for e in examples(batches(corpus, options, 10))]
    assert max(lengths) == 32
    assert min(lengths) < 20


def test_the_same_seed_gives_the_same_batches_and_another_seed_others():
    corpus = traceable_corpus(30)
    options = PretrainingOptions(max_seq_length=32, max_predictions_per_seq=5)
    first, again = batches(corpus, options, 6, seed=3), batches(corpus, options, 6, seed=3)
    other = batches(corpus, options, 6, seed=4)
    for x, y in zip(first, again, strict=True):
        for key in BATCH_KEYS:
            np.testing.assert_array_equal(x[key], y[key])
    differ = [
        not np.array_equal(x["input_ids"], z["input_ids"])
        for x, z in zip(first, other, strict=True)
    ]
    assert any(differ)


def test_later_epochs_mask_and_pair_the_same_chunks_differently():
    corpus = traceable_corpus(40)
    chunks = len(plan_chunks(corpus, UNTRUNCATED, 0))  # one chunk a document here
    count = math.ceil(2 * chunks / 8)
    stream = list(examples(batches(corpus, UNTRUNCATED, count, batch_size=8)))
    epoch_1, epoch_2 = stream[:chunks], stream[chunks : 2 * chunks]
    # A starts every chunk, so its first token names the chunk.
    assert sorted(split_segments(e)[0][0] for e in epoch_1) == sorted(
        split_segments(e)[0][0] for e in epoch_2
    )  # every chunk once per epoch ...
    inputs_1 = {tuple(e["input_ids"]) for e in epoch_1}
    inputs_2 = {tuple(e["input_ids"]) for e in epoch_2}
    assert len(inputs_1 & inputs_2) < chunks // 4  # ... but split, paired and masked anew


def test_resumed_iterator_yields_identical_batches():
    corpus = traceable_corpus(30)  # about 4 batches an epoch: resuming crosses epochs
    options = PretrainingOptions(max_seq_length=32, max_predictions_per_seq=5)
    tokenizer = IdTokenizer(30)

    def make():
        return pretraining_iterator(corpus, tokenizer, options, batch_size=8, seed=5)

    run = make()
    for _ in range(5):
        next(run)
    state = json.loads(json.dumps(run.get_state()))
    expected = [next(run) for _ in range(6)]
    resumed = make()
    resumed.set_state(state)
    for x, y in zip(expected, [next(resumed) for _ in range(6)], strict=True):
        for key in BATCH_KEYS:
            np.testing.assert_array_equal(x[key], y[key])


def test_resuming_with_another_seed_is_a_user_error():
    corpus = traceable_corpus(30)
    options = PretrainingOptions(max_seq_length=32)
    tokenizer = IdTokenizer(30)
    state = pretraining_iterator(corpus, tokenizer, options, batch_size=4, seed=1).get_state()
    other = pretraining_iterator(corpus, tokenizer, options, batch_size=4, seed=2)
    with pytest.raises(UserError, match="seed"):
        other.set_state(state)


def test_chunks_are_two_or_more_consecutive_sentences_covering_each_document():
    corpus = traceable_corpus(80, max_len=9)
    options = PretrainingOptions(max_seq_length=24, short_seq_prob=0.2)
    chunks = plan_chunks(corpus, options, seed=0)
    starts = corpus.document_starts
    covered = []
    for first, end, target in chunks:
        assert end - first >= 2 and 2 <= target <= options.max_num_tokens
        d = np.searchsorted(starts, first, side="right") - 1
        assert end <= starts[d + 1]  # inside one document
        covered.extend(range(first, end))
    multi = [d for d in range(corpus.num_documents) if starts[d + 1] - starts[d] >= 2]
    expected = [s for d in multi for s in range(starts[d], starts[d + 1])]
    assert covered == expected  # in order, no gaps, no overlaps, single sentences skipped


def test_truncation_keeps_contiguous_parts_and_trims_the_longer():
    rng = np.random.default_rng(0)
    a, b = np.arange(100, 130), np.arange(200, 205)
    ta, tb = truncate_pair(a, b, 20, rng)
    assert len(ta) + len(tb) == 20 and list(tb) == list(b)
    assert list(ta) == list(range(ta[0], ta[0] + len(ta)))
    ta, tb = truncate_pair(np.arange(10), np.arange(10), 6, rng)
    assert (len(ta), len(tb)) == (3, 3)


def test_documents_are_separated_by_blank_lines(tmp_path):
    (tmp_path / "a.txt").write_text("one.\ntwo.\n\n\nthree.\n  \nfour.\nfive.")
    with gzip.open(tmp_path / "b.txt.gz", "wt") as f:
        f.write("six.\nseven.\n")
    documents = read_documents([tmp_path / "a.txt", tmp_path / "b.txt.gz"])
    assert documents == [["one.", "two."], ["three."], ["four.", "five."], ["six.", "seven."]]


def test_missing_text_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_documents([tmp_path / "missing.txt"])


def test_corpus_without_sentence_pairs_is_a_user_error():
    singles = TokenizedCorpus.from_token_lists([[[7, 8]], [[9]], [[10, 11]]])
    with pytest.raises(UserError, match="two sentences"):
        plan_chunks(singles, PretrainingOptions(), 0)
    alone = TokenizedCorpus.from_token_lists([[[7, 8], [9]]])
    with pytest.raises(UserError, match="two documents"):
        plan_chunks(alone, PretrainingOptions(), 0)
