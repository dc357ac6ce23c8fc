"""Pre-flight: what must hold before money is spent, each failure with its fix.

``checks.py`` gathers the facts and runs every check; the check modules beside it are pure
functions from facts to results (access.py: permissions, image repository, Pathways images,
Kueue; capacity.py: reservation and quota; cloud_build.py: the Cloud Build account), and
results.py holds the result type they share.
"""
