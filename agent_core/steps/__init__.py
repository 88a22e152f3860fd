"""The loop's step, in its parts: plan the call (``planning``), take its streamed text (``deltas``), account for
it (``accounting``), judge an unusual reply (``endings``), read the reply (``reading``), run its tools (``acting``),
and write the step and the run's end (``closing``), over the run's state (``run_state``) and its progress note
(``progress``). ``agent_core.loop`` runs them in order; nothing here imports the loop."""
