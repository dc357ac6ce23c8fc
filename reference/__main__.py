"""``python -m reference``: rewrite docs/reference/ from the code."""

from reference.pages import write

for page in write():
    print(f"wrote {page}")
