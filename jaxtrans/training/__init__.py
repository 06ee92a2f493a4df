"""Task-agnostic training machinery: the loop (loop.py) and its guards, the pure step,
optimizer and schedules, loss, state, sharding, metrics, FLOPs and multi-host start-up.

What is trained comes from a ``TrainingTask`` (task.py) handed to
``loop.train_and_evaluate``; the tasks live in jaxtrans.tasks, which this package never
imports (``jaxtrans.tasks.train_and_evaluate`` runs the loop with them).
"""
