"""The course's functions against the code the field runs: tiny random ``transformers`` models (chapter 9)."""
