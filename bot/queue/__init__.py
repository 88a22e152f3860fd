"""Queue: a turn waits its thread's run slot and its workspace's fair share, then an arq job runs it.

Each thread's inbox and run slot (``turns``), the per-workspace and per-person gate (``fair``), the enqueue
(``arq_enqueue``), the arq job functions (``jobs``) and worker settings (``worker``), and the resumer that takes
over runs whose worker died (``resume``).
"""
