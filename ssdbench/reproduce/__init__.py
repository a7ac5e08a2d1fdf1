"""`ssdbench reproduce`: the SSD paper's findings as studies, each an ordinary sweep, each judged from its
recorded rounds (docs/DESIGN.md §10)."""
