"""What each fuzz case of fuzz_cases.py is expected to do: REFUSED (exit status 2, one
line: the input is invalid), ACCEPTED (exit 0: it is valid), or "" where either is right
(damaged data that data.skip_malformed may skip, a value whose outcome depends on the
alternative drawn). test_reliability_fuzz.py asserts them per case."""

REFUSED, ACCEPTED = "refused", "accepted"


# What a fresh run does with a value of FRESH_VALUES, where it is certain (else either).
FRESH_EXPECTED = {
    ("train.log_every", -1): REFUSED, ("train.checkpoint_every", -1): REFUSED,
    ("train.keep_checkpoints", -1): REFUSED, ("train.grad_accum_steps", 0): REFUSED,
    ("data.max_source_length", -1): REFUSED, ("data.batch_size", 0): REFUSED,
    ("data.batch_size", -8): REFUSED, ("data.pack_pool_batches", 0): REFUSED,
    ("data.pack_pool_batches", -1): REFUSED, ("mesh.data", 0): REFUSED,
    ("train.checkpoint_every", 10**9): ACCEPTED,
}  # fmt: skip


# The mutations of EVALUATE_FLAGS whose every alternative is valid, or whose outcome
# depends on the alternative (the rest are invalid input, refused).
EVALUATE_ACCEPTED = {"size_small"}
EVALUATE_EITHER = {"checkpoint", "alpha_odd", "plot_odd_sentence", "input_stdin_empty"}
CHECKPOINT_EXPECTED = {"avg:2": ACCEPTED, "avg:0": REFUSED, "avg:-1": REFUSED,
                       "avg:x": REFUSED, "-3": REFUSED, "avg:": REFUSED, "1e3": REFUSED,
                       "99999999999999999999": REFUSED}  # fmt: skip
