"""The phase names of a run, shared by the measurement and the (torch-free) report."""

# Phase names, highest priority first: where records overlap, an instant belongs to the first
# phase that covers it. Validation and checkpointing win over everything inside them; the
# warm-up window wins over the per-batch records of the steps it contains.
PHASES = (
    "checkpoint",
    "validation",
    "warmup",
    "data_wait",
    "batch_to_device",
    "train_step",
    "logging",
    # the training loop's own time between the phases above: Lightning's callback hooks, its
    # logger connector and loop bookkeeping around each step, which a hand-written loop does not
    # have. Lowest priority inside the loop, so it is exactly the loop time no other phase holds.
    "framework",
    "define_model",
    "setup",
    "teardown",
)

# The same phases in the order they happen in a run: how tables and charts list them.
PHASE_ORDER = (
    "define_model",
    "setup",
    "warmup",
    "data_wait",
    "batch_to_device",
    "train_step",
    "validation",
    "logging",
    "checkpoint",
    "framework",
    "teardown",
)
assert set(PHASE_ORDER) == set(PHASES)
