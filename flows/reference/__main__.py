"""``python -m flows.reference``: rewrite docs/reference/ from the code."""

from flows.reference.pages import write

for page in write():
    print(f"wrote {page}")
