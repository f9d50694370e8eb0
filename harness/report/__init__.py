"""Reports from stored runs: markdown and self-contained HTML, plots, the claims check,
comparisons across runs and history from asv results."""
