"""The golden set's harness (issue 45): cases from ``evals/``, run through the real service against scripted or
real models, judged on outcomes, scored as pass^k with cost per success; ``python -m bot eval`` runs it."""
