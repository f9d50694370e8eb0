"""The source articles' figures (``baselines/*.yaml``) and the claims check that holds a run's
records to them: like for like, or as a bound.
"""
