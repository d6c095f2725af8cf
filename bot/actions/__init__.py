"""What the workflows run beyond a comment: publishing a pipeline, the report run's checks, the
gating status, the post-merge plan.
"""
