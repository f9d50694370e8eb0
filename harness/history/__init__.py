"""History over commits: ``critpath history A..B`` records each commit with asv (the campaign),
and the report's History section reads asv's results back (the view).
"""
